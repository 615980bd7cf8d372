package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// roundTripStore is a memstore whose answers take rtt to come back once
// it has decided, as Redis's do.
type roundTripStore struct {
	s   *memstore.Store
	mu  sync.Mutex
	rtt time.Duration
}

func (s *roundTripStore) setRTT(d time.Duration) {
	s.mu.Lock()
	s.rtt = d
	s.mu.Unlock()
}

func (s *roundTripStore) wait() {
	s.mu.Lock()
	rtt := s.rtt
	s.mu.Unlock()
	time.Sleep(rtt)
}

func (s *roundTripStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d, err := s.s.Take(ctx, r)
	s.wait()
	return d, err
}

func (s *roundTripStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	err := s.s.TakeAll(ctx, rs, ds)
	s.wait()
	return err
}

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
				st := &roundTripStore{s: memstore.New(memstore.Options{})}
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
				st.setRTT(rtt)
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
