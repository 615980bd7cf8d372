package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncCloseMixedLoad: Takes, TakeAlls of two keys and Refunds from
// many goroutines, on keys whose rule flips between two limits (a chain
// of entries per key) and with batches every few milliseconds, racing
// with Close: Redis ends up counting each key's admissions less its
// refunds, exactly, each hit once.
func TestSyncCloseMixedLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := openShared(t, []string{srv.Addr}, false)
	s, err := fleet.NewSync(st, fleet.SyncOptions{Interval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	limits := []sluice.Limit{sluice.PerHour(1_000_000), sluice.PerHour(1_000_001)}
	const keys, workers, each = 4, 8, 200
	base := fmt.Sprintf("syncclosemixed/%d", time.Now().UnixNano())
	req := func(k, i int) sluice.Request {
		return sluice.Request{Key: fmt.Sprintf("%s/%d", base, k), Algorithm: sluice.FixedWindow, Limit: limits[i/50%2], Cost: 1, Now: sluicetest.T0}
	}
	var counted [keys]atomic.Int64 // admitted less refunded
	var local atomic.Bool
	var third sync.WaitGroup
	third.Add(workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			fail := func(err error) { errs <- fmt.Errorf("worker %d: %w", w, err) }
			for i := range each {
				if i == each/3 {
					third.Done() // Close runs once every worker is a third through
				}
				k := (w + i) % keys
				switch i % 4 {
				case 0, 1:
					r := req(k, i)
					d, err := s.Take(ctx, r)
					if err != nil {
						fail(err)
						return
					}
					if d.Allowed {
						counted[k].Add(1)
					}
				case 2:
					k2 := (k + 1) % keys
					rs := []sluice.Request{req(k, i), req(k2, i)}
					ds := make([]sluice.Decision, 2)
					if err := s.TakeAll(ctx, rs, ds); err != nil {
						fail(err)
						return
					}
					if sluice.AllAllowed(ds) {
						counted[k].Add(1)
						counted[k2].Add(1)
					}
				case 3:
					if _, err := s.Refund(ctx, req(k, i)); err != nil {
						fail(err)
						return
					}
					counted[k].Add(-1)
				}
				if s.Stats().Local > 0 {
					local.Store(true)
				}
			}
		})
	}
	third.Wait()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		q := req(k, 0)
		q.Cost = 0
		d, err := st.Take(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := limits[0].Rate-d.Remaining, counted[k].Load(); got != want {
			t.Errorf("key %d: Redis counts %d, admitted less refunded %d", k, got, want)
		}
	}
	if !local.Load() {
		t.Error("no decision was local: the test shows nothing about Close")
	}
}
