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
			code, took, err := getWithin(t, &httplimit.RetryTransport{Base: slowBase(2 * time.Second)}, srv.URL, 8*time.Second)
			if err != nil {
				t.Fatalf("after %v: %v; want the 429 at 2s", took, err)
			}
			if code != http.StatusTooManyRequests || took != 2*time.Second {
				t.Errorf("got %d after %v, want the 429 at 2s", code, took)
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
			code, took, err := getWithin(t, &httplimit.RetryTransport{Base: slowBase(2 * time.Second)}, srv.URL, 9500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusOK || took != 9*time.Second {
				t.Errorf("got %d after %v, want 200 at 9s", code, took)
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
			rt := &httplimit.RetryTransport{Base: slowBase(time.Second, 4*time.Second, time.Second)}
			code, took, err := getWithin(t, rt, srv.URL, 12500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusOK || took != 12*time.Second {
				t.Errorf("got %d after %v, want 200 at 12s", code, took)
			}
		})
	})
}
