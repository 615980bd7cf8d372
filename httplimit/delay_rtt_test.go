package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/storetest"
)

// TestMiddlewareLeakyBucketDelayOverRoundTrip: on a store whose answers
// take 20ms to come back once it has decided (as Redis's do), an admitted
// request whose slot leaves 100ms after the decision reaches the handler
// when the slot leaves, 100ms after it arrived: the round trip is part of
// its Delay, not added to it. It used to reach it at 120ms, behind its
// slot, with one rule (Take) as with two (TakeAll).
func TestMiddlewareLeakyBucketDelayOverRoundTrip(t *testing.T) {
	const rtt = 20 * time.Millisecond
	for _, c := range []struct {
		name  string
		rules func(lim *sluice.Limiter) []httplimit.Rule
	}{
		{"one rule", func(*sluice.Limiter) []httplimit.Rule { return nil }},
		{"two rules", func(lim *sluice.Limiter) []httplimit.Rule {
			return []httplimit.Rule{{Name: "other", Limiter: lim}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := storetest.NewRoundTrip()
				shaped := mustLimiter(t, st, sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
				wide := mustLimiter(t, st, sluice.LeakyBucket, sluice.PerSecond(1000).WithBurst(20))
				var start time.Time
				var reached []time.Duration
				h := httplimit.Middleware(httplimit.Options{Limiter: shaped, Rules: c.rules(wide)})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
					reached = append(reached, time.Since(start))
				}))
				start = time.Now()
				for range 2 { // slots leaving at 0 and 100ms, each waited for
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				}
				if want := []time.Duration{0, 100 * time.Millisecond}; len(reached) != 2 || reached[0] != want[0] || reached[1] != want[1] {
					t.Fatalf("handler reached at %v, want %v", reached, want)
				}
				st.SetRTT(rtt)
				// The next slot leaves at 200ms, 100ms after its decision.
				start = time.Now()
				reached = reached[:0]
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				if rec.Code != http.StatusOK || len(reached) != 1 || reached[0] != 100*time.Millisecond {
					t.Errorf("a request whose slot leaves 100ms after the decision, answers taking %v: status %d, handler reached at %v; want 200, reached at 100ms", rtt, rec.Code, reached)
				}
			})
		})
	}
}
