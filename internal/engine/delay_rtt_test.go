package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// roundTripStore is a memstore whose answers take rtt to come back once
// it has decided, as Redis's do.
type roundTripStore struct {
	s   *memstore.Store
	mu  sync.Mutex
	rtt time.Duration
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

// TestDelaySlotWithinMaxDelayOverRoundTrip: a delay rule whose queue
// (burst 2 at 10/s: 200ms) fits in its max_delay (210ms), so that no
// question comes before the take, on a store whose answers take 20ms to
// come back. A request whose slot leaves 200ms after the decision is
// within max_delay, and is admitted when the slot leaves: the round trip
// is part of its wait. It used to be added to it, 220ms, past max_delay:
// the request was refused, its slot counted all the same.
func TestDelaySlotWithinMaxDelayOverRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(2), rules.Delay, 210*time.Millisecond)
		st := &roundTripStore{s: memstore.New(memstore.Options{})}
		e, err := engine.New(engine.Options{Store: st, Rules: &rules.Set{Rules: []*rules.Rule{shaped}}, Metrics: metrics.New(prometheus.NewRegistry())})
		if err != nil {
			t.Fatal(err)
		}
		ms := []rules.Match{{Rule: shaped, Key: "s"}}
		var wg sync.WaitGroup
		for range 2 { // slots leaving at 0 and 100ms
			wg.Go(func() { e.Admit(context.Background(), ms, 1) })
		}
		synctest.Wait()
		st.mu.Lock()
		st.rtt = 20 * time.Millisecond
		st.mu.Unlock()
		start := time.Now()
		res := e.Admit(context.Background(), ms, 1)
		if after := time.Since(start); !res.Allowed || after != 200*time.Millisecond {
			t.Errorf("a slot leaving 200ms after the decision, max_delay 210ms, answers taking 20ms: allowed %v after %v (retry after %v); want allowed after 200ms", res.Allowed, after, res.Decision.RetryAfter)
		}
		wg.Wait()
	})
}
