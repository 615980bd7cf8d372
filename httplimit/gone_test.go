package httplimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
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
