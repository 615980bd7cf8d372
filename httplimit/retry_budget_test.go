package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
)

// The budget is shared by every request of the client: under a lasting
// overload the retries stop, whatever the attempts per request allow, and
// whether the server names no wait (a back-off) or asks for none
// (Retry-After: 0, a retry at once).
func TestRetryBudgetStopsARetryStorm(t *testing.T) {
	for _, header := range []map[string]string{nil, {"Retry-After": "0"}} {
		srv := newScripted(t, answer{http.StatusTooManyRequests, header})
		budget, err := httplimit.NewRetryBudget(0.1, 10)
		if err != nil {
			t.Fatal(err)
		}
		inBubble(t, func(t *testing.T) {
			rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 4}
			for range 100 {
				if code, _, _ := do(t, rt, "GET", srv.URL, "", nil); code != http.StatusTooManyRequests {
					t.Fatalf("got %d, want 429", code)
				}
			}
		})
		// Tokens 10 → 9, 8, 7, 6 on the first request's four attempts
		// (three retries, each allowed while more than 5 were left); the
		// second request's answer leaves 5, and no retry is allowed after
		// that.
		if got := srv.hits.Load(); got != 103 {
			t.Errorf("100 requests under a lasting 429 %v made %d attempts, want 103 (without a budget: 400)", header, got)
		}
		if got := budget.Tokens(); got != 0 {
			t.Errorf("429 %v: tokens left: got %v, want 0", header, got)
		}
	}
}

func TestRetryBudgetRefillsWithSuccesses(t *testing.T) {
	script := make([]answer, 0, 100)
	for range 10 {
		script = append(script, answer{http.StatusTooManyRequests, nil})
	}
	for range 70 {
		script = append(script, answer{http.StatusOK, nil})
	}
	script = append(script, answer{http.StatusTooManyRequests, nil}, answer{http.StatusTooManyRequests, nil}, answer{http.StatusOK, nil})
	srv := newScripted(t, script...)
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 4}
		// Spend it all: the first request's four attempts leave 6 tokens,
		// six more requests answered 429 (not retried) leave 0.
		for range 7 {
			do(t, rt, "GET", srv.URL, "", nil)
		}
		if got, hits := budget.Tokens(), srv.hits.Load(); got != 0 || hits != 10 {
			t.Fatalf("after 7 requests under 429: %v tokens, %d attempts; want 0, 10", got, hits)
		}
		for range 70 {
			if code, _, _ := do(t, rt, "GET", srv.URL, "", nil); code != http.StatusOK {
				t.Fatalf("got %d, want 200", code)
			}
		}
		if got := budget.Tokens(); got != 7 {
			t.Errorf("tokens after 70 successes: got %v, want 7 (0.1 each)", got)
		}
		// A 429 now leaves 6: one retry; its 429 leaves 5: no more.
		if code, _, _ := do(t, rt, "GET", srv.URL, "", nil); code != http.StatusTooManyRequests {
			t.Errorf("got %d, want the second 429", code)
		}
		if got, hits := budget.Tokens(), srv.hits.Load(); got != 5 || hits != 82 {
			t.Errorf("after one retry: %v tokens, %d attempts; want 5, 82", got, hits)
		}
	})
}

func TestNewRetryBudgetRefusesBadFigures(t *testing.T) {
	for _, tc := range []struct {
		ratio  float64
		tokens int
	}{{0, 10}, {-1, 10}, {1.5, 10}, {0.1, 0}, {0.1, 1001}, {0.1, 1}, {1, 2}} {
		if _, err := httplimit.NewRetryBudget(tc.ratio, tc.tokens); err == nil {
			t.Errorf("NewRetryBudget(%v, %d): no error", tc.ratio, tc.tokens)
		}
	}
	// 1 or 2 tokens would never allow a retry: the 429 before it takes
	// one, leaving no more than half. The error says so.
	_, err := httplimit.NewRetryBudget(0.1, 2)
	if err == nil || !strings.Contains(err.Error(), "never") {
		t.Errorf("NewRetryBudget(0.1, 2): got %v, want an error saying it would never allow a retry", err)
	}
}

// The smallest budget allowed, 3 tokens, allows a retry: the first 429
// leaves 2, more than half of 3; the retry's 429 leaves 1, and no more.
func TestRetryBudgetSmallest(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, nil})
	budget, err := httplimit.NewRetryBudget(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 4}
		if code, _, _ := do(t, rt, "GET", srv.URL, "", nil); code != http.StatusTooManyRequests {
			t.Fatalf("got %d, want 429", code)
		}
	})
	if got := srv.hits.Load(); got != 2 {
		t.Errorf("a request under a lasting 429 with 3 tokens made %d attempts, want 2", got)
	}
}

// A fleet: two transports (two processes' clients, say) share one budget,
// with requests in flight at once; however they interleave, the retries
// stop at the same bound.
func TestRetryBudgetSharedAcrossTransports(t *testing.T) {
	srv := newScripted(t, answer{http.StatusServiceUnavailable, nil})
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	inBubble(t, func(t *testing.T) {
		var wg sync.WaitGroup
		for range 2 {
			rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 10}
			for range 4 {
				wg.Go(func() {
					for range 10 {
						if code, _, _ := do(t, rt, "GET", srv.URL, "", nil); code != http.StatusServiceUnavailable {
							t.Errorf("got %d, want 503", code)
						}
					}
				})
			}
		}
		wg.Wait()
	})
	// A retry follows only a failure that left more than 5 of the 10
	// tokens: at most 4 retries in all (without a budget: 720).
	if got := srv.hits.Load(); got < 80 || got > 84 {
		t.Errorf("80 requests under a lasting 503 made %d attempts, want 80 to 84", got)
	}
}

// A RetryBudget made without NewRetryBudget (a zero value, shared by
// pointer) is the default budget: 10 tokens, 0.1 back per success.
func TestRetryBudgetZeroValue(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, nil})
	budget := &httplimit.RetryBudget{}
	inBubble(t, func(t *testing.T) {
		for range 2 {
			rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 4}
			if code, _, _ := do(t, rt, "GET", srv.URL, "", nil); code != http.StatusTooManyRequests {
				t.Fatalf("got %d, want 429", code)
			}
		}
	})
	// As with NewRetryBudget(0.1, 10): 4 attempts, then 1.
	if got := srv.hits.Load(); got != 5 {
		t.Errorf("2 requests under a lasting 429 with a zero RetryBudget made %d attempts, want 5", got)
	}
	if got := budget.Tokens(); got != 5 {
		t.Errorf("tokens left: got %v, want 5", got)
	}
}

// Tokens never go above the maximum, however many successes.
func TestRetryBudgetCapped(t *testing.T) {
	srv := newScripted(t, answer{http.StatusTooManyRequests, nil}, answer{http.StatusOK, nil})
	budget, _ := httplimit.NewRetryBudget(0.5, 3)
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 1}
		for range 10 {
			do(t, rt, "GET", srv.URL, "", nil)
		}
	})
	// 3 - 1 + 9 × 0.5, capped.
	if got := budget.Tokens(); got != 3 {
		t.Errorf("tokens after a 429 and 9 successes: got %v, want the maximum, 3", got)
	}
}

// As gRPC's retry throttling counts a failure only when its status is
// retryable and a success only for OK: an error answer the transport does
// not retry (a 404, a 500) neither takes a token nor gives one back; 2xx
// and 3xx answers give one back.
func TestRetryBudgetOtherErrorsAreNeutral(t *testing.T) {
	script := []answer{{http.StatusTooManyRequests, nil}, {http.StatusTooManyRequests, nil}, {http.StatusTooManyRequests, nil}, {http.StatusTooManyRequests, nil}}
	for _, code := range []int{http.StatusNotFound, http.StatusInternalServerError, http.StatusBadGateway, http.StatusBadRequest, http.StatusGatewayTimeout} {
		for range 10 {
			script = append(script, answer{code, nil})
		}
	}
	for _, code := range []int{http.StatusOK, http.StatusNoContent, http.StatusNotModified, http.StatusFound} {
		script = append(script, answer{code, nil})
	}
	srv := newScripted(t, script...)
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 4}
		do(t, rt, "GET", srv.URL, "", nil) // four 429s: 6 tokens left
		for range 50 {
			do(t, rt, "GET", srv.URL, "", nil)
		}
		if got := budget.Tokens(); got != 6 {
			t.Errorf("tokens after four 429s and 50 answers 4xx/5xx: got %v, want 6 (neither taken nor given back)", got)
		}
		// 200, 204, 304, 302 (not followed).
		client := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for range 4 {
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if got := budget.Tokens(); got != 6.4 {
			t.Errorf("tokens after 2xx and 3xx answers: got %v, want 6.4 (0.1 each)", got)
		}
	})
}

// A 429 or 503 on a request the transport may not retry (a POST without
// RetryNonIdempotent or an Idempotency-Key) takes no token: gRPC's retry
// throttling counts failures only of calls that have a retry policy. Such
// answers must not stop the retries of the requests that may be retried.
func TestRetryBudgetNotRetriedRequestsAreNeutral(t *testing.T) {
	var script []answer
	for range 10 {
		script = append(script, answer{http.StatusTooManyRequests, nil}, answer{http.StatusServiceUnavailable, nil})
	}
	srv := newScripted(t, script...)
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget}
		for range 20 {
			if code, _, _ := do(t, rt, "POST", srv.URL, "body", nil); code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
				t.Fatalf("POST: %d, want the 429 or 503 as it came (not retried)", code)
			}
		}
		if got := budget.Tokens(); got != 10 {
			t.Errorf("tokens after 20 refusals of POSTs that are never retried: got %v, want 10 (none taken)", got)
		}
	})
}

// A transport with retries disabled (MaxAttempts 1) retries nothing, so
// its refusals take nothing from a budget it shares with others: they
// would only stop the others' retries.
func TestRetryBudgetNoRetriesTransportIsNeutral(t *testing.T) {
	var script []answer
	for range 10 {
		script = append(script, answer{http.StatusTooManyRequests, nil}, answer{http.StatusServiceUnavailable, nil})
	}
	srv := newScripted(t, script...)
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	inBubble(t, func(t *testing.T) {
		once := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 1}
		for range 20 {
			if code, _, _ := do(t, once, "GET", srv.URL, "", nil); code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
				t.Fatalf("GET: %d, want the 429 or 503 as it came (not retried)", code)
			}
		}
		if got := budget.Tokens(); got != 10 {
			t.Errorf("tokens after 20 refusals through a transport with MaxAttempts 1: got %v, want 10 (none taken)", got)
		}
	})
	if got := srv.hits.Load(); got != 20 {
		t.Errorf("server saw %d requests, want 20 (none retried)", got)
	}
}

// A retry storm from many goroutines at once, against a server refusing
// two requests in three: however the goroutines interleave, the retries
// stay within what the budget states, half its tokens plus ratio of a
// token per success, where without a budget each request would retry
// until it got through (about 800 retries).
func TestRetryBudgetBoundsAConcurrentStorm(t *testing.T) {
	var served, succeeded atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1)%3 == 0 {
			succeeded.Add(1)
			return
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	budget, _ := httplimit.NewRetryBudget(0.1, 10)
	const goroutines, each = 16, 25
	inBubble(t, func(t *testing.T) {
		rt := &httplimit.RetryTransport{Base: noKeepAlive(), Budget: budget, MaxAttempts: 10}
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range each {
					do(t, rt, "GET", srv.URL, "", nil)
				}
			})
		}
		wg.Wait()
	})
	retries := served.Load() - goroutines*each
	bound := 5 + 0.1*float64(succeeded.Load())
	if float64(retries) > bound || retries <= 0 {
		t.Errorf("%d requests, %d successes: %d retries, want 1 to %v (half the 10 tokens + 0.1 per success)", goroutines*each, succeeded.Load(), retries, bound)
	}
}
