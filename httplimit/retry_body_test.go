package httplimit_test

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// stalled is a response body that gives a few bytes and then nothing, as
// a server that stops sending mid-body; Close ends a Read in progress.
type stalled struct {
	io.Reader
	pr     *io.PipeReader
	closes atomic.Int64
}

func newStalled(first string) *stalled {
	pr, _ := io.Pipe() // nothing is ever written
	return &stalled{Reader: io.MultiReader(strings.NewReader(first), pr), pr: pr}
}

func (s *stalled) Close() error {
	s.closes.Add(1)
	return s.pr.Close()
}

// The body of a 429 that stops arriving must not hold the retry: it is
// read during the wait and cut off when the wait ends (after a wait
// shorter than 50ms, 50ms after the answer, to keep the connection of a
// body that has arrived).
func TestRetryTransportStalledBodyDoesNotHoldTheRetry(t *testing.T) {
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{{"3", 3 * time.Second}, {"0", 50 * time.Millisecond}} {
		srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": tc.retryAfter}}, answer{http.StatusOK, nil})
		inBubble(t, func(t *testing.T) {
			var body *stalled
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := noKeepAlive().RoundTrip(r)
				if err == nil && resp.StatusCode == http.StatusTooManyRequests {
					resp.Body.Close()
					body = newStalled("Too Many")
					resp.Body = body
				}
				return resp, err
			})
			code, got, took := do(t, &httplimit.RetryTransport{Base: base}, "GET", srv.URL, "", nil)
			if code != http.StatusOK || got != "OK" || took != tc.want {
				t.Errorf("Retry-After: %s: got %d %q after %v, want 200 \"OK\" after %v", tc.retryAfter, code, got, took, tc.want)
			}
			if n := body.closes.Load(); n != 1 {
				t.Errorf("Retry-After: %s: the stalled 429 body was closed %d times, want 1", tc.retryAfter, n)
			}
		})
	}
}

// A 429 whose body never ends is read only up to a bound, then closed:
// the retry goes when the wait ends.
func TestRetryTransportEndlessBody(t *testing.T) {
	srv, _ := refusedOnce(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		chunk := strings.Repeat("x", 4096)
		for { // until the client hangs up
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	})
	inBubble(t, func(t *testing.T) {
		code, body, took := do(t, &httplimit.RetryTransport{Base: noKeepAlive()}, "GET", srv.URL, "", nil)
		if code != http.StatusOK || body != "ok" || took != time.Second {
			t.Errorf("got %d %q after %v, want 200 \"ok\" after 1s", code, body, took)
		}
	})
}

// The same over a real connection, HTTP/1.1 and HTTP/2, and gzipped
// (net/http's Transport unzipping it): closing the body ends a read in
// progress in each. The server sends the 429's header and part of its
// body, then holds the stream open.
func TestRetryTransportStalledBodyOverTheNetwork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h2, gzip bool
	}{{"HTTP/1.1", false, false}, {"HTTP/2", true, false}, {"HTTP/1.1 gzip", false, true}, {"HTTP/2 gzip", true, true}} {
		var hits atomic.Int64
		release := make(chan struct{})
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hits.Add(1) > 1 {
				io.WriteString(w, "ok")
				return
			}
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Length", "1000")
			if tc.gzip {
				w.Header().Set("Content-Encoding", "gzip")
			}
			w.WriteHeader(http.StatusTooManyRequests)
			if tc.gzip {
				zw := gzip.NewWriter(w)
				io.WriteString(zw, "Too Many")
				zw.Flush()
			} else {
				io.WriteString(w, "Too Many")
			}
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		tr := &http.Transport{}
		if tc.h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
			tr = srv.Client().Transport.(*http.Transport)
		} else {
			srv.Start()
		}
		// The timeout only turns a stall into a failure instead of a hang.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := (&httplimit.RetryTransport{Base: tr}).RoundTrip(req)
		if err != nil {
			t.Errorf("%s: RoundTrip: %v, want the retry's 200", tc.name, err)
		} else {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != "ok" || err != nil || (resp.ProtoMajor == 2) != tc.h2 {
				t.Errorf("%s: got %d %q over %s (%v), want 200 \"ok\"", tc.name, resp.StatusCode, b, resp.Proto, err)
			}
		}
		if got := hits.Load(); got != 2 {
			t.Errorf("%s: server saw %d requests, want 2", tc.name, got)
		}
		cancel()
		close(release)
		tr.CloseIdleConnections()
		srv.Close()
	}
}

// Each retry sends the request as the caller made it (its headers, its
// body read afresh) and leaves the caller's request as it was.
func TestRetryTransportResendsTheRequestAsMade(t *testing.T) {
	limited := answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}
	srv := newScripted(t, limited, limited, answer{http.StatusOK, nil})
	inBubble(t, func(t *testing.T) {
		req, _ := http.NewRequest("PUT", srv.URL+"/things/1?x=1", strings.NewReader("abc"))
		req.Header.Set("Authorization", "Bearer secret")
		body, url, length := req.Body, *req.URL, req.ContentLength
		resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("got %d, want 200", resp.StatusCode)
		}
		if req.Body != body || req.GetBody == nil || *req.URL != url || req.ContentLength != length ||
			len(req.Header) != 1 || req.Header.Get("Authorization") != "Bearer secret" {
			t.Errorf("the caller's request changed: %+v", req)
		}
	})
	if !equal(srv.bodies, []string{"abc", "abc", "abc"}) || !equal(srv.auths, []string{"Bearer secret", "Bearer secret", "Bearer secret"}) {
		t.Errorf("server received bodies %q, Authorization %q; want the request's each time", srv.bodies, srv.auths)
	}
}

// After a retry the answer's Request is the caller's, as net/http's
// Transport answers after its own retries.
func TestRetryTransportResponseRequestIsTheCallers(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}, answer{http.StatusOK, nil})
	inBubble(t, func(t *testing.T) {
		req, _ := http.NewRequest("PUT", srv.URL, strings.NewReader("abc"))
		resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Request != req {
			t.Errorf("got %d with Request %p, want 200 with the caller's request %p", resp.StatusCode, resp.Request, req)
		}
	})
}

// A request with http.NoBody needs no GetBody to be sent again.
func TestRetryTransportNoBody(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}, answer{http.StatusOK, nil})
	inBubble(t, func(t *testing.T) {
		req, _ := http.NewRequest("DELETE", srv.URL, http.NoBody)
		req.GetBody = nil
		resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("got %d, want 200 after one retry", resp.StatusCode)
		}
	})
	if got := srv.hits.Load(); got != 2 {
		t.Errorf("server saw %d requests, want 2", got)
	}
}

// closeCount is a request body that counts its Close calls.
type closeCount struct {
	io.Reader
	n *atomic.Int64
}

func (c closeCount) Close() error { c.n.Add(1); return nil }

// Every request body RoundTrip is given or makes is closed exactly once,
// also the one made for a retry that a cancel stops during its wait.
func TestRetryTransportClosesEachRequestBodyOnce(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "2"}}, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "2"}}, answer{http.StatusOK, nil})
		inBubble(t, func(t *testing.T) {
			var closes []*atomic.Int64
			body := func() io.ReadCloser {
				n := new(atomic.Int64)
				closes = append(closes, n)
				return closeCount{strings.NewReader("abc"), n}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if cancelled {
				time.AfterFunc(3*time.Second, cancel) // during the second wait
			}
			req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL, nil)
			req.Body, req.ContentLength = body(), 3
			req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
			resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			if cancelled != (err != nil) {
				t.Errorf("cancelled %v: got %v", cancelled, err)
			}
			// The transport may close a body it sent after RoundTrip has
			// returned: wait for its goroutines to be done.
			synctest.Wait()
			if len(closes) != 3 {
				t.Errorf("cancelled %v: %d bodies, want 3 (the request's and two for retries)", cancelled, len(closes))
			}
			for i, n := range closes {
				if n.Load() != 1 {
					t.Errorf("cancelled %v: body %d closed %d times, want 1", cancelled, i, n.Load())
				}
			}
		})
	}
}

// A GetBody that fails leaves the 429 in hand as the answer, whole.
func TestRetryTransportGetBodyFails(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}, answer{http.StatusOK, nil})
	inBubble(t, func(t *testing.T) {
		req, _ := http.NewRequest("PUT", srv.URL, strings.NewReader("abc"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, io.ErrUnexpectedEOF }
		resp, err := (&httplimit.RetryTransport{Base: noKeepAlive()}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests || string(b) != "Too Many Requests" || err != nil {
			t.Errorf("got %d %q (%v), want the 429 as it came", resp.StatusCode, b, err)
		}
	})
	if got := srv.hits.Load(); got != 1 {
		t.Errorf("server saw %d requests, want 1", got)
	}
}

// The 429 a RetryTransport drops is read to its end before the retry, so
// the retry goes out on the same keep-alive connection instead of a new
// one. Real loopback connections (no bubble: a bubble cannot hold an idle
// keep-alive connection); the back-off of 500ms is the time the drain has,
// for a body that arrived with its header.
func TestRetryTransportReusesTheConnection(t *testing.T) {
	srv := newScripted(t, answer{http.StatusServiceUnavailable, nil}, answer{http.StatusOK, nil})
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	rt := &httplimit.RetryTransport{Base: base, BaseDelay: 500 * time.Millisecond,
		Jitter: func(d time.Duration) time.Duration { return d }}
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", srv.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d, want 200 after one retry", resp.StatusCode)
	}
	if len(reused) != 2 || !reused[1] {
		t.Errorf("attempts got connections reused %v, want [false true]: the retry on the first one", reused)
	}
}

// A cancel during the wait leaves nothing behind: RoundTrip returns at
// the cancel, the 429's stalled body is closed once and the goroutine
// reading it has ended (a goroutine left blocked in the bubble fails the
// test).
func TestRetryTransportCancelDuringWaitLeavesNothing(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "10"}})
	inBubble(t, func(t *testing.T) {
		var body *stalled
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := noKeepAlive().RoundTrip(r)
			if err == nil {
				resp.Body.Close()
				body = newStalled("Too Many")
				resp.Body = body
			}
			return resp, err
		})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(3*time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		start := time.Now()
		resp, err := (&httplimit.RetryTransport{Base: base}).RoundTrip(req)
		if resp != nil || err != context.Canceled || time.Since(start) != 3*time.Second {
			t.Errorf("got %v, %v after %v; want nil, context.Canceled at the cancel, 3s", resp, err, time.Since(start))
		}
		if n := body.closes.Load(); n != 1 {
			t.Errorf("the 429's body was closed %d times, want 1", n)
		}
	})
	if got := srv.hits.Load(); got != 1 {
		t.Errorf("server saw %d requests, want 1", got)
	}
}
