package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestMiddlewareDeadlineDuringDelay503: a request whose own deadline
// passes 10s into a minute's Delay (its client still there) is answered
// 503 with Retry-After for the rest of its wait (50s), not the empty 200
// net/http sends for a handler that wrote nothing nor the 499 of a client
// gone; it never reaches the handler, carries no rate-limit headers, and
// its place is given back.
func TestMiddlewareDeadlineDuringDelay503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := mustLimiter(t, memstore.New(memstore.Options{}), sluice.LeakyBucket, sluice.PerMinute(1).WithBurst(5))
		hits := 0
		h := httplimit.Middleware(httplimit.Options{Limiter: lim})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits++
			io.WriteString(w, "ran")
		}))
		first := httptest.NewRecorder()
		h.ServeHTTP(first, httptest.NewRequest("GET", "/", nil))
		if first.Code != 200 || hits != 1 {
			t.Fatalf("the first request: %d, %d hits; want 200 and the handler run", first.Code, hits)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if took := time.Since(start); took != 10*time.Second {
			t.Errorf("the request returned after %v, want 10s (its deadline)", took)
		}
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("deadline during its Delay: status %d, want 503", w.Code)
		}
		if got := w.Header().Get("Retry-After"); got != "50" {
			t.Errorf("Retry-After %q, want 50 (the rest of its wait)", got)
		}
		if body := w.Body.String(); body != `{"error":"deadline_exceeded","retry_after_ms":50000}`+"\n" {
			t.Errorf("body %q", body)
		}
		for _, k := range []string{httplimit.HeaderLimit, httplimit.HeaderRateLimit, "X-Ratelimit-Remaining"} {
			if v := w.Header().Get(k); v != "" {
				t.Errorf("%s: %q on a request whose place was given back; want none", k, v)
			}
		}
		if hits != 1 {
			t.Errorf("the handler ran %d times, want once (the first request only)", hits)
		}
		if d, err := lim.AllowN(context.Background(), "default:192.0.2.1", 1); err != nil || d.Delay != 50*time.Second {
			t.Errorf("the next request: %+v, %v; want Delay 50s (the place given back)", d, err)
		}
	})
}
