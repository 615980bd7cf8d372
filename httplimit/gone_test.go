package httplimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestClientGoneIsNotAStoreFailure: a request whose client has gone (its
// context ended before the store answered) is not a store outage. Under
// FailOpen it must not run the next handler uncounted: a client could
// otherwise pass any limit on a handler with side effects (send a mail, an
// SMS) by closing the connection right after its request. Nor is it
// reported or logged as the store failing.
func TestClientGoneIsNotAStoreFailure(t *testing.T) {
	for _, policy := range []httplimit.ErrorPolicy{httplimit.FailOpen, httplimit.FailClosed} {
		lim := mustLimiter(t, sluicetest.ContextStore(memstore.New(memstore.Options{})), sluice.FixedWindow, sluice.PerMinute(1))
		var hits, storeErrs atomic.Int64
		var logs logBuffer
		h := httplimit.Middleware(httplimit.Options{Limiter: lim, OnError: policy,
			Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
			OnStoreError: func(*http.Request, error) { storeErrs.Add(1) },
		})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		for range 3 {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the client has gone
			r := httptest.NewRequest("POST", "/send-sms", nil).WithContext(ctx)
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		if hits.Load() != 0 || storeErrs.Load() != 0 || logs.String() != "" {
			t.Errorf("policy %d: 3 requests of gone clients: next handler ran %d times, OnStoreError %d times, log %q; want 0, 0, nothing",
				policy, hits.Load(), storeErrs.Load(), logs.String())
		}
		// A live client is still limited as before.
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/send-sms", nil))
		if w.Code != 200 || hits.Load() != 1 {
			t.Errorf("policy %d: a live client's request: status %d, handler ran %d times; want 200, 1", policy, w.Code, hits.Load())
		}
	}
}

// TestDeadlineIsAStoreFailure: a request whose deadline passed before the
// store answered (behind http.TimeoutHandler, or a context with a timeout
// shorter than the store's) met a store slower than it allows: a store
// failure, answered per OnError and reported, as the daemon's engine does.
// Only a cancelled context is a client gone.
func TestDeadlineIsAStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		policy   httplimit.ErrorPolicy
		wantHits int64
		wantCode int
	}{{httplimit.FailOpen, 1, 200}, {httplimit.FailClosed, 0, 503}} {
		lim := mustLimiter(t, sluicetest.ContextStore(memstore.New(memstore.Options{})), sluice.FixedWindow, sluice.PerMinute(1))
		var hits, storeErrs atomic.Int64
		var logs logBuffer
		h := httplimit.Middleware(httplimit.Options{Limiter: lim, OnError: tc.policy,
			Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
			OnStoreError: func(*http.Request, error) { storeErrs.Add(1) },
		})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		ctx, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0)) // passed
		defer cancel()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if hits.Load() != tc.wantHits || w.Code != tc.wantCode || storeErrs.Load() != 1 || logs.String() == "" {
			t.Errorf("policy %d, deadline passed: handler ran %d times, status %d, OnStoreError %d times, log %q; want %d, %d, 1, a warning",
				tc.policy, hits.Load(), w.Code, storeErrs.Load(), logs.String(), tc.wantHits, tc.wantCode)
		}
	}
}

// With two leaky bucket rules, a client gone while it waits for the later
// place gives back only that one: the earlier place has left (its time
// came), and given back it would move its queue up a place, the requests
// behind it then leaving a spacing early.
func TestMiddlewareClientGoneKeepsPlaceThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Options{})
		fast := mustLimiter(t, s, sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
		slow := mustLimiter(t, s, sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(5))
		all := func(*http.Request) (string, bool) { return "k", true }
		h := httplimit.Middleware(httplimit.Options{Rules: []httplimit.Rule{
			{Name: "fast", Limiter: fast, KeyFunc: all},
			{Name: "slow", Limiter: slow, KeyFunc: all},
		}})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // leaves at once
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		done := make(chan struct{})
		go func() { // fast's place at 100ms, slow's at 1s: gone at 500ms
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			close(done)
		}()
		synctest.Wait()
		for i := range 9 { // fast's places at 200ms … 1s
			if d, err := fast.AllowN(context.Background(), "fast:k", 1); err != nil || !d.Allowed {
				t.Fatalf("fast request %d: %+v, %v", i, d, err)
			}
		}
		<-done
		// At 500ms fast's queue holds the places up to 1s (the gone
		// request's, at 100ms, has left): a new one leaves at 1.1s.
		if d, err := fast.AllowN(context.Background(), "fast:k", 1); err != nil || d.Delay != 600*time.Millisecond {
			t.Errorf("fast request at 500ms: %+v, %v; want Delay 600ms (the place that left kept)", d, err)
		}
		// slow's next place is the gone client's, at 1s (not 2s).
		if d, err := slow.AllowN(context.Background(), "slow:k", 1); err != nil || d.Delay != 500*time.Millisecond {
			t.Errorf("slow request at 500ms: %+v, %v; want Delay 500ms (the gone client's place given back)", d, err)
		}
	})
}
