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

// TestSyncCloseDecisionInFlight: a decision under way when Close runs
// (past the check that the Sync is open, its key not yet locked: a daemon
// handler still running past shutdown_timeout) must not record a hit after
// Close's last batch, which nothing would send: the fleet would under-count
// it. It is decided in the shared store instead, exactly, as decisions
// after Close are. Before, the hit stayed in memory and Redis counted 2 of
// the 3 admitted. The key's view is fresh (decided locally), or two
// intervals old (read again first); the decision is a Take or a TakeAll.
func TestSyncCloseDecisionInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := openShared(t, []string{srv.Addr}, false)
	limit := sluice.PerHour(100)
	for _, c := range []struct {
		name     string
		all, old bool
	}{{"take", false, false}, {"take/old view", false, true}, {"takeall", true, false}, {"takeall/old view", true, true}} {
		entered, gate := make(chan struct{}), make(chan struct{})
		var hold atomic.Bool
		s, err := fleet.NewSync(st, fleet.SyncOptions{Interval: time.Hour, Applies: func(sluice.Request) bool { // batches only by Close
			if hold.CompareAndSwap(true, false) {
				close(entered)
				<-gate
			}
			return true
		}})
		if err != nil {
			t.Fatal(err)
		}
		var rs []sluice.Request
		for k := range 2 {
			r := sluice.Request{Key: fmt.Sprintf("synccloseinflight/%d/%s/%d", time.Now().UnixNano(), c.name, k), Algorithm: sluice.FixedWindow, Limit: limit, Cost: 1, Now: sluicetest.T0}
			rs = append(rs, r)
			for range 2 { // the first is cold, the second makes the entry: both decided in Redis
				if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
					t.Fatalf("%s: Take = %+v, %v", c.name, d, err)
				}
			}
		}
		if c.old {
			s.Age(3 * time.Hour) // the decision reads the keys again first
		}
		hold.Store(true)
		took := make(chan error, 1)
		go func() {
			ds := make([]sluice.Decision, 2)
			var err error
			if c.all {
				err = s.TakeAll(ctx, rs, ds)
			} else {
				ds[0], err = s.Take(ctx, rs[0])
				if err == nil {
					ds[1], err = s.Take(ctx, rs[1])
				}
			}
			if err == nil && !sluice.AllAllowed(ds) {
				err = fmt.Errorf("refused: %+v", ds)
			}
			took <- err
		}()
		<-entered // the decision is past the open check
		if err := s.Close(); err != nil {
			t.Fatalf("%s: Close: %v", c.name, err)
		}
		close(gate)
		if err := <-took; err != nil {
			t.Fatalf("%s: the decision in flight: %v", c.name, err)
		}
		// Redis counted the 3 admitted of each key.
		for _, r := range rs {
			q := r
			q.Cost = 0
			d, err := st.Take(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if got := limit.Rate - d.Remaining; got != 3 {
				t.Errorf("%s: Redis counts %d for %s after 3 admissions and Close, want 3: a hit recorded after Close's batch is never sent", c.name, got, r.Key)
			}
		}
	}
}

// TestSyncCloseUnderLoad: decisions racing with Close from many
// goroutines, on keys decided locally, are each counted in Redis once:
// those that recorded a hit before Close's batch by it, the others in
// Redis directly. Redis's count equals the admissions.
func TestSyncCloseUnderLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := openShared(t, []string{srv.Addr}, false)
	s, err := fleet.NewSync(st, fleet.SyncOptions{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	limit := sluice.PerHour(1_000_000)
	const keys, workers, each = 4, 8, 150
	var rs []sluice.Request
	for k := range keys {
		r := sluice.Request{Key: fmt.Sprintf("synccloseload/%d/%d", time.Now().UnixNano(), k), Algorithm: sluice.FixedWindow, Limit: limit, Cost: 1, Now: sluicetest.T0}
		rs = append(rs, r)
		for range 2 { // warm: the key's next decisions are local
			if _, err := s.Take(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	var admitted [keys]atomic.Int64
	for k := range keys {
		admitted[k].Store(2)
	}
	var started sync.WaitGroup
	started.Add(workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if i == each/3 {
					started.Done() // Close runs once every worker is a third through
				}
				k := (w + i) % keys
				d, err := s.Take(ctx, rs[k])
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	started.Wait()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Take: %v", err)
	}
	for k, r := range rs {
		q := r
		q.Cost = 0
		d, err := st.Take(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := limit.Rate-d.Remaining, admitted[k].Load(); got != want {
			t.Errorf("key %d: Redis counts %d, %d were admitted", k, got, want)
		}
	}
	if got := s.Stats().Local; got == 0 {
		t.Error("no decision was local: the test shows nothing about Close")
	}
}
