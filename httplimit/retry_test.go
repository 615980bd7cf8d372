package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func TestRetryTransportWaitsWhatTheServerAsks(t *testing.T) {
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"Retry-After seconds", map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{"Retry-After over RateLimit", map[string]string{"Retry-After": "3", "RateLimit": `"api";r=0;t=9`}, 3 * time.Second},
		{"RateLimit t of the exhausted limit", map[string]string{"RateLimit": `"a";r=4;t=9, "b";r=0;t=5`}, 5 * time.Second},
		{"RateLimit largest t of the exhausted limits", map[string]string{"RateLimit": `"a, ;x";r=0;t=7, "b";r=0;t=5`}, 7 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
				srv := newScripted(t, answer{status, tc.header}, answer{status, tc.header}, answer{http.StatusOK, nil})
				inBubble(t, func(t *testing.T) {
					rt := &httplimit.RetryTransport{Base: noKeepAlive(), Jitter: func(time.Duration) time.Duration {
						t.Error("backed off with jitter although the server named a wait")
						return 0
					}}
					code, body, took := do(t, rt, "GET", srv.URL, "", nil)
					if code != http.StatusOK || body != "OK" {
						t.Errorf("after two %ds: got %d %q, want 200 \"OK\"", status, code, body)
					}
					if took != 2*tc.want {
						t.Errorf("after two %ds: took %v, want 2 × %v", status, took, tc.want)
					}
				})
				if got := srv.hits.Load(); got != 3 {
					t.Errorf("status %d: server saw %d requests, want 3", status, got)
				}
			}
		})
	}
}

func TestRetryTransportRetryAfterDate(t *testing.T) {
	// The server, outside the bubble, is told the Retry-After and Date
	// to send ("" for no Date field).
	type fields struct{ retryAfter, date string }
	var at atomic.Pointer[fields]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := at.Swap(nil); f != nil {
			w.Header().Set("Retry-After", f.retryAfter)
			w.Header()["Date"] = nil // net/http adds its own otherwise
			if f.date != "" {
				w.Header().Set("Date", f.date)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	inBubble(t, func(t *testing.T) {
		// The bubble's clock starts on a whole second. Without a Date,
		// the date is read against the client's clock.
		date := time.Now().Add(7 * time.Second).UTC().Format(http.TimeFormat)
		at.Store(&fields{date, ""})
		code, _, took := do(t, &httplimit.RetryTransport{Base: noKeepAlive()}, "GET", srv.URL, "", nil)
		if code != http.StatusOK || took != 7*time.Second {
			t.Errorf("Retry-After: %s: got %d after %v, want 200 after 7s", date, code, took)
		}
		// With one, against the server's: here an hour behind ours, so
		// that the date is in our past, but 7s after the server's now.
		server := time.Now().Add(-time.Hour)
		f := fields{server.Add(7 * time.Second).UTC().Format(http.TimeFormat), server.UTC().Format(http.TimeFormat)}
		at.Store(&f)
		code, _, took = do(t, &httplimit.RetryTransport{Base: noKeepAlive()}, "GET", srv.URL, "", nil)
		if code != http.StatusOK || took != 7*time.Second {
			t.Errorf("Retry-After: %s with Date: %s: got %d after %v, want 200 after 7s", f.retryAfter, f.date, code, took)
		}
	})
}

func TestRetryTransportBacksOffWithFullJitter(t *testing.T) {
	srv := newScripted(t, answer{http.StatusServiceUnavailable, nil})
	budget, _ := httplimit.NewRetryBudget(1, 100) // not the limit here
	inBubble(t, func(t *testing.T) {
		var ceilings []time.Duration
		rt := &httplimit.RetryTransport{
			Base:        noKeepAlive(),
			Budget:      budget,
			MaxAttempts: 6,
			BaseDelay:   time.Second,
			MaxDelay:    5 * time.Second,
			MaxElapsed:  time.Hour,
			// The largest wait full jitter allows, to see the ceilings.
			Jitter: func(d time.Duration) time.Duration { ceilings = append(ceilings, d); return d },
		}
		code, body, took := do(t, rt, "GET", srv.URL, "", nil)
		want := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
		if !equal(ceilings, want) {
			t.Errorf("back-off ceilings: got %v, want %v", ceilings, want)
		}
		if took != 17*time.Second {
			t.Errorf("took %v, want the sum of the waits, 17s", took)
		}
		if code != http.StatusServiceUnavailable || body != "Service Unavailable" {
			t.Errorf("after the last attempt: got %d %q, want the server's 503 as it came", code, body)
		}
	})
	if got := srv.hits.Load(); got != 6 {
		t.Errorf("server saw %d requests, want MaxAttempts = 6", got)
	}
}

func TestRetryTransportDefaultJitterStaysUnderTheCeiling(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, nil})
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), MaxAttempts: 3, BaseDelay: time.Second}
		_, _, took := do(t, rt, "GET", srv.URL, "", nil)
		// Full jitter: [0, 1s) then [0, 2s).
		if took < 0 || took >= 3*time.Second {
			t.Errorf("two back-offs took %v, want under 1s + 2s", took)
		}
	})
}

func TestRetryTransportGivesUp(t *testing.T) {
	tooLong := answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "10"}}
	t.Run("MaxElapsed", func(t *testing.T) {
		srv := newScripted(t, tooLong)
		inBubble(t, func(t *testing.T) {
			rt := &httplimit.RetryTransport{Base: noKeepAlive(), MaxElapsed: 15 * time.Second}
			code, _, took := do(t, rt, "GET", srv.URL, "", nil)
			// One wait of 10s ends within 15s; a second would end at 20s.
			if code != http.StatusTooManyRequests || took != 10*time.Second {
				t.Errorf("got %d after %v, want 429 after 10s", code, took)
			}
		})
		if got := srv.hits.Load(); got != 2 {
			t.Errorf("server saw %d requests, want 2", got)
		}
	})
	// A date past 2262 (beyond nanoseconds since 1970 in an int64) is as
	// far as it says: given up at once, not read as a wait of 0.
	t.Run("Retry-After in the year 9999", func(t *testing.T) {
		srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}})
		inBubble(t, func(t *testing.T) {
			code, _, took := do(t, &httplimit.RetryTransport{Base: noKeepAlive()}, "GET", srv.URL, "", nil)
			if code != http.StatusTooManyRequests || took != 0 {
				t.Errorf("got %d after %v, want the 429 at once", code, took)
			}
		})
		if got := srv.hits.Load(); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
	})
	t.Run("context deadline before the wait ends", func(t *testing.T) {
		srv := newScripted(t, tooLong)
		inBubble(t, func(t *testing.T) {
			code, took, err := getWithin(t, &httplimit.RetryTransport{Base: noKeepAlive()}, srv.URL, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusTooManyRequests || took != 0 {
				t.Errorf("got %d after %v, want the 429 at once", code, took)
			}
		})
		if got := srv.hits.Load(); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
	})
	// An attempt that would start at the deadline cannot be answered: the
	// wait that ends there is not taken either.
	t.Run("context deadline when the wait ends", func(t *testing.T) {
		srv := newScripted(t, tooLong, answer{http.StatusOK, nil})
		inBubble(t, func(t *testing.T) {
			code, took, err := getWithin(t, &httplimit.RetryTransport{Base: noKeepAlive()}, srv.URL, 10*time.Second)
			if err != nil {
				t.Fatalf("got %v, want the 429 at once", err)
			}
			if code != http.StatusTooManyRequests || took != 0 {
				t.Errorf("got %d after %v, want the 429 at once", code, took)
			}
		})
		if got := srv.hits.Load(); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
	})
	t.Run("context cancelled during the wait", func(t *testing.T) {
		srv := newScripted(t, tooLong)
		inBubble(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(3*time.Second, cancel)
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			start := time.Now()
			resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
			if !errors.Is(err, context.Canceled) || resp != nil {
				t.Errorf("got %v, %v; want nil, context.Canceled", resp, err)
			}
			if time.Since(start) != 3*time.Second {
				t.Errorf("returned after %v, want 3s (at the cancel)", time.Since(start))
			}
		})
	})
}

// Cancelled with a cause during a wait, RoundTrip returns the cause, as
// net/http's Transport does when the cancel comes during an attempt.
func TestRetryTransportCancelCause(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "10"}})
	inBubble(t, func(t *testing.T) {
		shutdown := errors.New("shutting down")
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(3*time.Second, func() { cancel(shutdown) })
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
		if !errors.Is(err, shutdown) || resp != nil {
			t.Errorf("got %v, %v; want nil, the cause %q", resp, err, shutdown)
		}
	})
}

func TestRetryTransportRetriesOnlyWhatIsSafe(t *testing.T) {
	limited := answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}
	ok := answer{http.StatusOK, nil}
	tests := []struct {
		name        string
		method      string
		body        string
		header      map[string]string
		nonIdem     bool
		noGetBody   bool
		wantHits    int64
		wantBodiess []string
	}{
		{"GET", "GET", "", nil, false, false, 2, []string{"", ""}},
		{"PUT with body", "PUT", "x=1", nil, false, false, 2, []string{"x=1", "x=1"}},
		{"DELETE", "DELETE", "", nil, false, false, 2, []string{"", ""}},
		{"POST", "POST", "x=1", nil, false, false, 1, []string{"x=1"}},
		{"PATCH", "PATCH", "x=1", nil, false, false, 1, []string{"x=1"}},
		{"POST with Idempotency-Key", "POST", "x=1", map[string]string{"Idempotency-Key": "k1"}, false, false, 2, []string{"x=1", "x=1"}},
		{"POST when told", "POST", "x=1", nil, true, false, 2, []string{"x=1", "x=1"}},
		{"POST when told, body not replayable", "POST", "x=1", nil, true, true, 1, []string{"x=1"}},
		{"PUT, body not replayable", "PUT", "x=1", nil, false, true, 1, []string{"x=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScripted(t, limited, ok)
			inBubble(t, func(t *testing.T) {
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				req, _ := http.NewRequest(tc.method, srv.URL, body)
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				if tc.noGetBody {
					req.GetBody = nil
				}
				resp, err := (&httplimit.RetryTransport{Base: noKeepAlive(), RetryNonIdempotent: tc.nonIdem}).RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				want := http.StatusOK
				if tc.wantHits == 1 {
					want = http.StatusTooManyRequests
				}
				if resp.StatusCode != want {
					t.Errorf("got %d, want %d", resp.StatusCode, want)
				}
			})
			if got := srv.hits.Load(); got != tc.wantHits {
				t.Errorf("server saw %d requests, want %d", got, tc.wantHits)
			}
			if !equal(srv.bodies, tc.wantBodiess) {
				t.Errorf("server received bodies %q, want %q", srv.bodies, tc.wantBodiess)
			}
		})
	}
}

func TestRetryTransportDoesNotModifyTheRequest(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}, answer{http.StatusOK, nil})
	inBubble(t, func(t *testing.T) {
		req, _ := http.NewRequest("PUT", srv.URL, strings.NewReader("abc"))
		req.Header.Set("X-Test", "1")
		before := req.Header.Clone()
		resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if len(req.Header) != len(before) || req.Header.Get("X-Test") != "1" {
			t.Errorf("request headers changed: %v, were %v", req.Header, before)
		}
	})
}

// End to end with the library's own middleware: the client waits exactly
// what the limiter says and then gets through. The server's limiter reads
// the client's (bubble) clock, set before each attempt.
func TestRetryTransportAgainstMiddleware(t *testing.T) {
	var clock atomic.Int64
	limiter, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.Limit{Rate: 2, Period: 10 * time.Second},
		sluice.WithClock(func() time.Time { return time.Unix(0, clock.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	var passed atomic.Int64
	h := httplimit.Middleware(httplimit.Options{Limiter: limiter, Name: "api"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passed.Add(1)
		io.WriteString(w, "ok")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	inBubble(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			clock.Store(time.Now().UnixNano())
			return noKeepAlive().RoundTrip(r)
		})
		rt := &httplimit.RetryTransport{Base: base}
		// The bubble starts at a multiple of 10s: one fixed window.
		var took []time.Duration
		for range 5 {
			code, body, d := do(t, rt, "GET", srv.URL, "", nil)
			if code != http.StatusOK || body != "ok" {
				t.Fatalf("got %d %q, want 200 \"ok\"", code, body)
			}
			took = append(took, d)
		}
		want := []time.Duration{0, 0, 10 * time.Second, 0, 10 * time.Second}
		if !equal(took, want) {
			t.Errorf("each request took %v, want %v", took, want)
		}
	})
	if got := passed.Load(); got != 5 {
		t.Errorf("%d requests reached the handler, want 5", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A Base that breaks the RoundTripper contract gets an error, as
// http.Client gives one, never a panic or a nil response with a nil error.
func TestRetryTransportBaseWithoutResponse(t *testing.T) {
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	req, _ := http.NewRequest("GET", "http://example.invalid/", nil)
	resp, err := (&httplimit.RetryTransport{Base: base}).RoundTrip(req)
	if resp != nil || err == nil {
		t.Errorf("RoundTrip over a Base answering nil, nil: got %v, %v; want nil and an error", resp, err)
	}
}

// A 429 without a body (a Base that is not net/http's) is waited out and
// retried like any other.
func TestRetryTransportResponseWithoutBody(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "2"}}, answer{http.StatusOK, nil})
	inBubble(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := noKeepAlive().RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusTooManyRequests {
				resp.Body.Close()
				resp.Body = nil
			}
			return resp, err
		})
		code, body, took := do(t, &httplimit.RetryTransport{Base: base}, "GET", srv.URL, "", nil)
		if code != http.StatusOK || body != "OK" || took != 2*time.Second {
			t.Errorf("got %d %q after %v, want 200 \"OK\" after 2s", code, body, took)
		}
	})
}

// http.Client.CloseIdleConnections reaches the Base through the
// RetryTransport: the server sees its idle connection closed.
func TestRetryTransportCloseIdleConnections(t *testing.T) {
	closed := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			close(closed)
		}
	}
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: &httplimit.RetryTransport{Base: &http.Transport{}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // only so that a failure does not hang
		t.Fatal("client.CloseIdleConnections: the server's connection is still open")
	}
}
