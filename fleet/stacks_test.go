package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/redisstore"
)

// namedStore is one decorator stack of decoratorStacks.
type namedStore struct {
	name string
	s    sluice.Store
}

// decoratorStacks returns every decorator over rs, alone and stacked as
// the daemon stacks them (and the Fallback in local mode), for the
// conformance tests of the optional methods. Leases apply to the windows
// only: on the buckets their figures are the grant's, not exact (see
// TestLeaseConformance).
func decoratorStacks(t *testing.T, rs *redisstore.Store) []namedStore {
	t.Helper()
	sy := newSync(t, rs, fleet.SyncOptions{Interval: 20 * time.Millisecond})
	le := newLease(t, rs, fleet.LeaseOptions{Applies: func(r sluice.Request) bool {
		return r.Algorithm == sluice.FixedWindow || r.Algorithm == sluice.SlidingWindowCounter
	}})
	fallback := func(s sluice.Store, o fleet.FallbackOptions) sluice.Store {
		f := fleet.NewFallback(s, o)
		t.Cleanup(f.Close)
		return f
	}
	cache := func(s sluice.Store) sluice.Store { return fleet.NewOverLimitCache(s, fleet.OverLimitOptions{}) }
	down := func(context.Context) error { return sluice.ErrStoreUnavailable }
	return []namedStore{
		{"Sync", sy},
		{"Lease", le},
		{"OverLimitCache", cache(rs)},
		{"Fallback", fallback(rs, fleet.FallbackOptions{})},
		{"Fallback/local", fallback(rs, fleet.FallbackOptions{StartLocal: true, Probe: down})},
		{"Fallback/OverLimitCache/Redis", fallback(cache(rs), fleet.FallbackOptions{})},
		{"Fallback/OverLimitCache/Sync", fallback(cache(sy), fleet.FallbackOptions{})},
		{"Fallback/OverLimitCache/Lease", fallback(cache(le), fleet.FallbackOptions{})},
	}
}
