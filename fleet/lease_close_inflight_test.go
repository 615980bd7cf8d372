package fleet_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseCloseDecisionInFlight: a decision under way when Close runs
// (past the check that the Lease is open, its key not yet locked) must not
// reserve units after Close gave the key's back: nothing would give those
// back, and the fleet would admit less until they expired (a window's
// end, a bucket's refill). It is decided in the shared store instead, as
// decisions after Close are. Before, it reserved a chunk of 10 that
// stayed out of the store's count until the hour's window ended.
func TestLeaseCloseDecisionInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := openShared(t, []string{srv.Addr}, false)
	for _, all := range []bool{false, true} {
		entered, gate := make(chan struct{}), make(chan struct{})
		var hold atomic.Bool
		l, err := fleet.NewLease(st, fleet.LeaseOptions{Chunk: 10, Applies: func(r sluice.Request) bool {
			if hold.CompareAndSwap(true, false) {
				close(entered)
				<-gate
			}
			return true
		}})
		if err != nil {
			t.Fatal(err)
		}
		limit := sluice.PerHour(100)
		var rs []sluice.Request
		for k := range 2 {
			r := sluice.Request{Key: fmt.Sprintf("closeinflight/%d/%v/%d", time.Now().UnixNano(), all, k), Algorithm: sluice.FixedWindow, Limit: limit, Cost: 1, Now: sluicetest.T0}
			rs = append(rs, r)
			for range 2 { // the first is cold (decided in Redis), the second reserves
				if d, err := l.Take(ctx, r); err != nil || !d.Allowed {
					t.Fatalf("Take = %+v, %v", d, err)
				}
			}
		}
		hold.Store(true)
		took := make(chan error, 1)
		go func() {
			ds := make([]sluice.Decision, 2)
			var err error
			if all {
				err = l.TakeAll(ctx, rs, ds)
			} else {
				ds[0], err = l.Take(ctx, rs[0])
				ds[1], _ = l.Take(ctx, rs[1])
			}
			if err == nil && !sluice.AllAllowed(ds) {
				err = fmt.Errorf("refused: %+v", ds)
			}
			took <- err
		}()
		<-entered // the decision is past the open check
		if err := l.CloseAt(sluicetest.T0); err != nil {
			t.Fatal(err)
		}
		close(gate)
		if err := <-took; err != nil {
			t.Fatalf("TakeAll %v: the decision in flight: %v", all, err)
		}
		// Redis counted the 3 admitted of each key, and holds nothing
		// reserved: a fresh reader sees 97 left.
		for _, r := range rs {
			q := r
			q.Cost = 0
			d, err := st.Take(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != limit.Rate-3 {
				t.Errorf("TakeAll %v: Redis has %d left of %s after 3 admissions and Close, want %d: units reserved after Close stay out of the count", all, d.Remaining, r.Key, limit.Rate-3)
			}
		}
		if s := l.Stats(); s.Granted != s.Spent+s.Returned {
			t.Errorf("TakeAll %v: after Close: granted %d, spent %d, returned %d: units held by nobody", all, s.Granted, s.Spent, s.Returned)
		}
	}
}
