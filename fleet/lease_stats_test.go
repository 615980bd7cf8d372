package fleet_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseStatsReport: a report past the limit gives the units held
// back and is charged in the store, exactly: Returned counts the units,
// and Calls, the reservations, does not count the charge (OnLease, which
// the daemon times reservations with, is not called for it either).
func TestLeaseStatsReport(t *testing.T) {
	srv := redistest.StartServer(t)
	var reserved atomic.Int64
	l := newLease(t, openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: 10, OnLease: func(_, _ int64, _ time.Duration, err error) {
		if err == nil {
			reserved.Add(1)
		}
	}})
	ctx := context.Background()
	r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0.Add(10 * time.Minute)}
	for i := range 2 { // cold, then the 9 left reserved and one spent
		if d, err := l.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take #%d = %+v, %v; want allowed", i, d, err)
		}
	}
	rep := r
	rep.Cost, rep.Force = 20, true
	if _, err := l.Take(ctx, rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	st := l.Stats()
	if st.Returned != 8 {
		t.Errorf("Returned = %d after a report past the limit, want the 8 units held", st.Returned)
	}
	if st.Calls != uint64(reserved.Load()) || st.Calls != 1 {
		t.Errorf("Calls = %d, reservations made %d; want 1 and 1: a report's charge is no reservation", st.Calls, reserved.Load())
	}
}
