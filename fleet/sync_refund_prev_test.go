package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncRefundReachesUnsentPreviousWindow: a sliding window counter's
// refund lowers the current window, then the previous one. When the
// previous window's hits are not sent yet and the refund reaches past
// the current window, giving back in the store alone found less there
// than the key had counted (the store lacked those hits; the floor at 0
// then kept them): Redis ended with more counted than a store that saw
// every hit. The store must end as Reference does.
func TestSyncRefundReachesUnsentPreviousWindow(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	sy := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour}) // no batch but Flush's
	ctx := context.Background()
	ref := sluicetest.NewReference()
	l := sluice.PerMinute(100)
	r := sluice.Request{Key: fmt.Sprintf("swc-prev/%d", time.Now().UnixNano()), Algorithm: sluice.SlidingWindowCounter, Limit: l, Now: sluicetest.T0}
	both := func(call string, cost int64, at time.Duration) {
		t.Helper()
		q := r
		q.Cost, q.Now = cost, sluicetest.T0.Add(at)
		do, want := sy.Take, ref.Take
		if call == "Refund" {
			do, want = sy.Refund, ref.Refund
		}
		w, err := want(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := do(ctx, q)
		if err != nil || got != w {
			t.Fatalf("%s(cost %d, t0+%v) = %+v, %v; want %+v", call, cost, at, got, err, w)
		}
	}
	// Two in the store (cold, then the entry's first read), flushed.
	both("Take", 5, 0)
	both("Take", 5, time.Second)
	if err := sy.Flush(); err != nil {
		t.Fatal(err)
	}
	// Decided locally, not sent: 30 in the first window.
	for i := range 3 {
		both("Take", 10, 10*time.Second+time.Duration(i)*time.Second)
	}
	// The next window: nothing counted in it yet; a refund of 25 lowers
	// the previous window's 40 to 15 (the store has only 10 of them).
	both("Refund", 25, 70*time.Second)
	if err := sy.Flush(); err != nil {
		t.Fatal(err)
	}
	q := r
	q.Cost, q.Now = 0, sluicetest.T0.Add(80*time.Second)
	w, _ := ref.Take(ctx, q)
	if got, err := rs.Take(ctx, q); err != nil || got != w {
		t.Errorf("the store after the batch: %+v, %v; want %+v (as a store that saw every hit)", got, err, w)
	}
}
