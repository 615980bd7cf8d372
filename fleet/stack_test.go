package fleet_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestStackedTables runs the step tables through the decorators stacked
// as the package doc allows and the daemon stacks them: the Fallback
// outside, the OverLimitCache next to the shared store's side, over a Sync
// or a Lease on one Redis (a single instance: exact on the tables) and
// over Redis itself. Each stack must come out with the store's figures.
func TestStackedTables(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	sy := newSync(t, rs, fleet.SyncOptions{Interval: 20 * time.Millisecond})
	le := newLease(t, rs, fleet.LeaseOptions{})
	fallback := func(s sluice.Store) sluice.Store {
		f := fleet.NewFallback(s, fleet.FallbackOptions{})
		t.Cleanup(f.Close)
		return f
	}
	cache := func(s sluice.Store) sluice.Store { return fleet.NewOverLimitCache(s, fleet.OverLimitOptions{}) }
	for _, st := range []struct {
		name string
		s    sluice.Store
	}{
		{"Fallback/OverLimitCache/Redis", fallback(cache(rs))},
		{"OverLimitCache/Sync", cache(sy)},
		{"Fallback/OverLimitCache/Sync", fallback(cache(sy))},
		{"OverLimitCache/Lease", cache(le)},
		{"Fallback/OverLimitCache/Lease", fallback(cache(le))},
		{"Fallback/Sync", fallback(sy)},
		{"Fallback/Lease", fallback(le)},
	} {
		t.Run(st.name, func(t *testing.T) {
			for _, tb := range sluicetest.Tables() {
				t.Run(tb.Name, func(t *testing.T) { sluicetest.RunTable(t, st.s, tb) })
			}
		})
	}
}
