package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// A hostile or broken server's Retry-After, answered on every attempt:
// none makes the client wait past MaxElapsed, and none makes it retry
// more often than MaxAttempts allows.
func TestRetryTransportHostileRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter string
		hits       int64
		took       time.Duration
		jittered   bool // the value is no wait: the back-off (its ceilings 100, 200, 400ms) is used
	}{
		{"0 on every answer", "0", 4, 0, false},
		{"a date in the past", "Mon, 02 Jan 2006 15:04:05 GMT", 4, 0, false},
		{"years ahead", "31536000", 1, 0, false},
		{"past time.Duration", "99999999999999999999999", 1, 0, false},
		{"MaxInt64 seconds", "9223372036854775807", 1, 0, false},
		{"just past MaxElapsed", "31", 1, 0, false},
		{"negative", "-5", 4, 700 * time.Millisecond, true},
		{"fractional", "1.5", 4, 700 * time.Millisecond, true},
		{"garbage", "soon, please", 4, 700 * time.Millisecond, true},
		{"spaces around", " \t7 \t", 4, 21 * time.Second, false},
		{"disagreeing values", "1, 20", 4, 700 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": tc.retryAfter}})
			budget, _ := httplimit.NewRetryBudget(1, 100)
			inBubble(t, func(t *testing.T) {
				jittered := false
				rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget,
					Jitter: func(d time.Duration) time.Duration { jittered = true; return d }}
				code, body, took := do(t, rt, "GET", srv.URL, "", nil)
				if code != http.StatusTooManyRequests || body != "Too Many Requests" {
					t.Errorf("got %d %q, want the last 429 as it came", code, body)
				}
				if took != tc.took || jittered != tc.jittered {
					t.Errorf("took %v (back-off used: %v), want %v (%v)", took, jittered, tc.took, tc.jittered)
				}
			})
			if got := srv.hits.Load(); got != tc.hits {
				t.Errorf("server saw %d requests, want %d", got, tc.hits)
			}
		})
	}
}

// http.Client.Timeout is a deadline the transport sees: a Retry-After
// past it returns the 429 at once rather than sleeping into the timeout.
func TestRetryTransportClientTimeout(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "10"}}, answer{http.StatusOK, nil})
	inBubble(t, func(t *testing.T) {
		client := &http.Client{Transport: &httplimit.RetryTransport{Base: noKeepAlive()}, Timeout: 5 * time.Second}
		start := time.Now()
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatalf("got %v, want the 429", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || string(b) != "Too Many Requests" || err != nil || time.Since(start) != 0 {
			t.Errorf("got %d %q (%v) after %v, want the 429 at once, body readable", resp.StatusCode, b, err, time.Since(start))
		}
	})
}

// A burst of requests refused at once, none succeeding: however many
// there are and however they interleave, at most 4 retries (each 429
// takes one of the 10 tokens, a retry needs more than 5 left; if every
// 429 comes before any retry is asked for, none), and the tokens stop at
// 0.
func TestRetryBudgetBurstOfConcurrentFailures(t *testing.T) {
	const n = 40
	var arrived atomic.Int64
	all := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == n {
			close(all)
		}
		<-all // the first n answer together; the retries after them
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 10}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if code, _, _ := do(t, rt, "GET", srv.URL, "", nil); code != http.StatusTooManyRequests {
					t.Errorf("got %d, want 429", code)
				}
			})
		}
		wg.Wait()
	})
	if retries := arrived.Load() - n; retries > 4 {
		t.Errorf("%d requests refused at once made %d retries, want at most 4", n, retries)
	}
	if got := budget.Tokens(); got != 0 {
		t.Errorf("tokens left %v, want 0 (never below)", got)
	}
}

// A request cancelled while its attempt is in flight takes nothing from
// the budget: there was no answer.
func TestRetryBudgetCancelledAttemptIsNeutral(t *testing.T) {
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	}))
	defer srv.Close()
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-entered; cancel() }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := (&httplimit.RetryTransport{Base: tr, Budget: budget}).RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want the cancel's error", resp.StatusCode)
	}
	if got := budget.Tokens(); got != 10 {
		t.Errorf("tokens after a cancelled attempt: %v, want 10", got)
	}
}

// A POST marked idempotent but whose body cannot be read again is sent
// once; one with a large body that can is resent whole, even when the
// server refuses it without reading it.
func TestRetryTransportIdempotencyKeyBodies(t *testing.T) {
	big := strings.Repeat("b", 4<<20)
	var got []int
	var mu sync.Mutex
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests) // the body unread
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, len(b))
		mu.Unlock()
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	rt := &httplimit.RetryTransport{Base: tr}

	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(big))
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	if resp.StatusCode != http.StatusOK || len(got) != 1 || got[0] != len(big) {
		t.Errorf("4 MiB POST with Idempotency-Key: got %d, server read %v, want 200 after the body resent whole", resp.StatusCode, got)
	}
	mu.Unlock()

	hits.Store(0)
	req, _ = http.NewRequest("POST", srv.URL, io.NopCloser(strings.NewReader("abc")))
	req.Header.Set("Idempotency-Key", "k2")
	resp, err = rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || hits.Load() != 1 {
		t.Errorf("POST with Idempotency-Key, no GetBody: got %d after %d attempts, want the 429 after 1", resp.StatusCode, hits.Load())
	}
}

// An Upgrade request refused with a 429 is retried, and the 101 that
// follows comes back with its writable body.
func TestRetryTransportUpgrade(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo " + line)
		brw.Flush()
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := (&httplimit.RetryTransport{Base: tr}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		t.Fatalf("got %d, body %T; want 101 with an io.ReadWriteCloser", resp.StatusCode, resp.Body)
	}
	io.WriteString(rw, "hi\n")
	b := make([]byte, 8)
	if _, err := io.ReadFull(rw, b); err != nil || string(b) != "echo hi\n" {
		t.Errorf("over the upgraded connection: %q, %v; want \"echo hi\\n\"", b, err)
	}
}

// http.Client follows each redirect with a RoundTrip of its own, each
// with its own MaxElapsed: a server that answers every hop 429
// Retry-After: 20 and then redirects would hold a client.Get for 20s a
// hop. The client's Timeout (a deadline on the request's context, which
// every hop keeps) bounds the whole: the hop whose wait would end past it
// returns its 429 at once.
func TestRetryTransportRedirectChainUnderClientTimeout(t *testing.T) {
	var hits atomic.Int64
	seen := map[string]bool{}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		mu.Lock()
		again := seen[r.URL.Path]
		seen[r.URL.Path] = true
		mu.Unlock()
		if !again {
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		http.Redirect(w, r, r.URL.Path+"x", http.StatusFound)
	}))
	defer srv.Close()
	inBubble(t, func(t *testing.T) {
		client := &http.Client{Transport: &httplimit.RetryTransport{Base: noKeepAlive()}, Timeout: 50 * time.Second}
		start := time.Now()
		resp, err := client.Get(srv.URL + "/")
		if err != nil {
			t.Fatalf("got %v, want a 429", err)
		}
		resp.Body.Close()
		// Hop 1: 429, 20s, 302; hop 2: 429, 20s (ends at 40s), 302; hop 3:
		// 429, whose wait would end at 60s.
		if took := time.Since(start); resp.StatusCode != http.StatusTooManyRequests || took != 40*time.Second {
			t.Errorf("got %d after %v, want hop 3's 429 at 40s", resp.StatusCode, took)
		}
	})
	if got := hits.Load(); got != 5 {
		t.Errorf("server saw %d requests, want 5", got)
	}
}

// Each form of wait a server may name, as a real server sends it (its
// Date and Unix times on its own clock, the real one; the client's is the
// bubble's): the client waits exactly that, once, then gets through.
func TestRetryTransportServerWaitForms(t *testing.T) {
	tests := []struct {
		name   string
		header func(now time.Time) map[string]string
	}{
		{"RateLimit with RateLimit-Policy", func(time.Time) map[string]string {
			return map[string]string{"RateLimit": `"default";r=0;t=20`, "RateLimit-Policy": `"default";q=100;w=60`}
		}},
		{"RateLimit, a token for the name", func(time.Time) map[string]string {
			return map[string]string{"RateLimit": `default;r=0;t=20, burst;r=3;t=1`}
		}},
		{"RateLimit, draft 07", func(time.Time) map[string]string {
			return map[string]string{"RateLimit": "limit=100, remaining=0, reset=20"}
		}},
		{"RateLimit-Reset seconds", func(time.Time) map[string]string {
			return map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "0", "RateLimit-Reset": "20"}
		}},
		// As GitLab answers, without Retry-After.
		{"RateLimit-Reset a Unix time", func(now time.Time) map[string]string {
			return map[string]string{"RateLimit-Limit": "600", "RateLimit-Remaining": "0", "RateLimit-Reset": strconv.FormatInt(now.Unix()+20, 10)}
		}},
		{"X-RateLimit-Reset seconds", func(time.Time) map[string]string {
			return map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "20"}
		}},
		{"X-RateLimit-Reset a Unix time", func(now time.Time) map[string]string {
			return map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(now.Unix()+20, 10)}
		}},
		{"Retry-After a date", func(now time.Time) map[string]string {
			return map[string]string{"Retry-After": now.Add(20 * time.Second).UTC().Format(http.TimeFormat)}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, hits := refusedOnce(t, func(w http.ResponseWriter, r *http.Request) {
				now := time.Now().Truncate(time.Second)
				w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
				for k, v := range tc.header(now) {
					w.Header().Set(k, v)
				}
				w.WriteHeader(http.StatusTooManyRequests)
			})
			inBubble(t, func(t *testing.T) {
				rt := &httplimit.RetryTransport{Base: noKeepAlive(), Jitter: func(time.Duration) time.Duration {
					t.Error("backed off with jitter although the server named a wait")
					return 0
				}}
				code, body, took := do(t, rt, "GET", srv.URL, "", nil)
				if code != http.StatusOK || body != "ok" || took != 20*time.Second {
					t.Errorf("got %d %q after %v, want 200 \"ok\" after 20s", code, body, took)
				}
			})
			if got := hits.Load(); got != 2 {
				t.Errorf("server saw %d requests, want 2", got)
			}
		})
	}
}

// A CONNECT is not retried unless the transport is told to, and a 429 to
// one never retried takes no token.
func TestRetryTransportConnect(t *testing.T) {
	for _, told := range []bool{false, true} {
		srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}, answer{http.StatusOK, nil})
		budget, _ := httplimit.NewRetryBudget(0.1, 10)
		inBubble(t, func(t *testing.T) {
			req, _ := http.NewRequest("CONNECT", srv.URL, nil)
			req.Host = "upstream.example:443"
			resp, err := (&httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, RetryNonIdempotent: told}).RoundTrip(req)
			if err != nil {
				t.Fatalf("RetryNonIdempotent %v: %v", told, err)
			}
			resp.Body.Close()
			want, tokens := http.StatusTooManyRequests, 10.0
			if told {
				want, tokens = http.StatusOK, 9.1
			}
			if resp.StatusCode != want || budget.Tokens() != tokens {
				t.Errorf("RetryNonIdempotent %v: got %d, %v tokens; want %d, %v", told, resp.StatusCode, budget.Tokens(), want, tokens)
			}
		})
		if want := map[bool]int64{false: 1, true: 2}[told]; srv.hits.Load() != want {
			t.Errorf("RetryNonIdempotent %v: server saw %d requests, want %d", told, srv.hits.Load(), want)
		}
	}
}
