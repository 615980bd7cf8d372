package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// slowBase sends each request to the real server after a delay on the
// bubble's clock (a slow network or server), ending early with the
// request's context.
func slowBase(delays ...time.Duration) http.RoundTripper {
	n := 0
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		d := delays[min(n, len(delays)-1)]
		n++
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return nil, context.Cause(r.Context())
		}
		return noKeepAlive().RoundTrip(r)
	})
}

// A retry that cannot be answered before the request's deadline is not
// waited for: when the wait would end less than the fastest attempt so far
// before the deadline, the 429 in hand is returned at once, not a
// deadline error after sleeping into it.
func TestRetryTransportDeadlineLeavesNoTimeForTheRetry(t *testing.T) {
	limited := answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "5"}}
	t.Run("no time left", func(t *testing.T) {
		srv := newScripted(t, limited, answer{http.StatusOK, nil})
		inBubble(t, func(t *testing.T) {
			// The attempt takes 2s; its wait would end at 7s, and a
			// second attempt at 9s, past the deadline at 8s.
			ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			start := time.Now()
			resp, err := (&httplimit.RetryTransport{Base: slowBase(2 * time.Second)}).RoundTrip(req)
			if err != nil {
				t.Fatalf("after %v: %v; want the 429 at 2s", time.Since(start), err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests || time.Since(start) != 2*time.Second {
				t.Errorf("got %d after %v, want the 429 at 2s", resp.StatusCode, time.Since(start))
			}
		})
		if got := srv.hits.Load(); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
	})
	t.Run("time left", func(t *testing.T) {
		srv := newScripted(t, limited, answer{http.StatusOK, nil})
		inBubble(t, func(t *testing.T) {
			// The second attempt ends at 9s, before the deadline.
			ctx, cancel := context.WithTimeout(t.Context(), 9500*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			start := time.Now()
			resp, err := (&httplimit.RetryTransport{Base: slowBase(2 * time.Second)}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || time.Since(start) != 9*time.Second {
				t.Errorf("got %d after %v, want 200 at 9s", resp.StatusCode, time.Since(start))
			}
		})
	})
	// The fastest attempt so far is the estimate: one slow answer does
	// not stop the retries that a fast one shows can still be answered.
	t.Run("the fastest attempt counts", func(t *testing.T) {
		srv := newScripted(t, answer{http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}}, limited, answer{http.StatusOK, nil})
		inBubble(t, func(t *testing.T) {
			// Attempts of 1s, 4s and 1s: 0–1s, wait to 2s, 2–6s, wait to
			// 11s, 11–12s, before the deadline at 12.5s though the
			// slower attempt would end past it.
			ctx, cancel := context.WithTimeout(t.Context(), 12500*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			start := time.Now()
			resp, err := (&httplimit.RetryTransport{Base: slowBase(time.Second, 4*time.Second, time.Second)}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || time.Since(start) != 12*time.Second {
				t.Errorf("got %d after %v, want 200 at 12s", resp.StatusCode, time.Since(start))
			}
		})
	})
}
