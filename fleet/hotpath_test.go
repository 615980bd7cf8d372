package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A decision on a key the instance holds, Sync's from its fresh view and
// Lease's from the units it holds, allocates nothing, with an Applies set
// (it gets a copy of the request, which stays on the stack). The Sync
// interval is an hour and the instant fixed, so no batch, reload or
// reservation runs while the allocations are counted.
func TestHotPathAllocs(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	now := time.Now()
	prefix := fmt.Sprintf("allocs/%d/", now.UnixNano())
	applies := func(r sluice.Request) bool { return strings.HasPrefix(r.Key, prefix) }
	s := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour, Applies: applies})
	l := newLease(t, rs, fleet.LeaseOptions{Chunk: 1 << 20, Applies: applies})
	const runs = 1000
	for _, c := range []struct {
		name  string
		store sluice.Store
		local func() uint64
		// warm is the local decisions of the run AllocsPerRun makes
		// before counting, the key's second request: none for Sync (the
		// entry's first read, decided in the store), one for Lease (it
		// reserves a chunk and spends from it).
		warm uint64
	}{
		{"sync", s, func() uint64 { return s.Stats().Local }, 0},
		{"lease", l, func() uint64 { return l.Stats().Local }, 1},
	} {
		for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow} {
			t.Run(c.name+"/"+alg.String(), func(t *testing.T) {
				ctx := context.Background()
				r := sluice.Request{Key: prefix + c.name + "/" + alg.String(), Algorithm: alg, Limit: sluice.PerMinute(1_000_000_000), Cost: 1, Now: now}
				// The first decision is cold: decided in the store, one
				// round trip.
				if d, err := c.store.Take(ctx, r); err != nil || !d.Allowed {
					t.Fatalf("first Take(%q) = %+v, %v; want allowed", r.Key, d, err)
				}
				before := c.local()
				var failed error
				allocs := testing.AllocsPerRun(runs, func() {
					if d, err := c.store.Take(ctx, r); err != nil || !d.Allowed {
						failed = fmt.Errorf("Take(%q) = %+v, %v; want allowed", r.Key, d, err)
					}
				})
				if failed != nil {
					t.Fatal(failed)
				}
				if allocs != 0 {
					t.Errorf("Take(%q) on a key held: %v allocations per decision, want 0", r.Key, allocs)
				}
				// AllocsPerRun runs it once more before counting.
				if got := c.local() - before; got != runs+c.warm {
					t.Errorf("local decisions = %d, want %d: the hot path was not the one measured", got, runs+c.warm)
				}
			})
		}
	}
}
