package fleet_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

func newLease(t testing.TB, inner fleet.LeaseStore, o fleet.LeaseOptions) *fleet.Lease {
	t.Helper()
	l, err := fleet.NewLease(inner, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// On the windows a single instance decides exactly as the shared store
// (what it holds is given back in its own view), so the whole suite runs
// with leases on the fixed window and the counter. A bucket's lease spends
// tokens the store counted at the grant, and refilled from then: its
// admissions stay within the limit (the bound tests), but its Remaining and
// ResetAfter are the store's at the grant, not exact, so for the buckets
// only the step tables run.
func TestLeaseConformance(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openRedis(t, []string{srv.Addr}, false)
	windows := newLease(t, rs, fleet.LeaseOptions{Applies: func(r *sluice.Request) bool {
		return r.Algorithm == sluice.FixedWindow || r.Algorithm == sluice.SlidingWindowCounter
	}})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return windows })
	all := newLease(t, rs, fleet.LeaseOptions{})
	for _, tb := range sluicetest.Tables() {
		t.Run("Tables/"+tb.Name, func(t *testing.T) { sluicetest.RunTable(t, all, tb) })
	}
	if st := all.Stats(); st.Local == 0 || st.Calls == 0 || st.Calls >= st.Local {
		t.Errorf("Stats = %+v: want local decisions, and fewer calls", st)
	}
}
