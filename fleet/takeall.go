package fleet

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice"
)

// The TakeAll of Sync and of Lease share their frame: split the requests
// into those the decorator decides itself and those left to the shared
// store, decide the first in key order (each key locked once), then ask
// the store about the rest. What differs is the local decision.

// splitAll returns the indexes of the requests of rs that local reports
// the decorator decides, in key order, with their ticks, and the indexes of
// the others, left to the shared store. name ("sync", "lease") prefixes
// its errors.
func splitAll(name string, rs []sluice.Request, ds []sluice.Decision, local func(*sluice.Request) bool) (loc, rem []int, ticks []sluice.Ticks, err error) {
	if len(ds) != len(rs) {
		return nil, nil, nil, fmt.Errorf("fleet: %s: take all: %d decisions for %d requests", name, len(ds), len(rs))
	}
	ticks = make([]sluice.Ticks, len(rs))
	for i := range rs {
		if !local(&rs[i]) {
			rem = append(rem, i)
			continue
		}
		t, err := check(&rs[i])
		if err != nil {
			return nil, nil, nil, fmt.Errorf("fleet: %s: take all %q: %w", name, rs[i].Key, err)
		}
		ticks[i] = t
		loc = append(loc, i)
	}
	// Lock each key once, in key order.
	slices.SortStableFunc(loc, func(a, b int) int { return keyOf(&rs[a]).compare(keyOf(&rs[b])) })
	return loc, rem, ticks, nil
}

// takeRest asks inner about the requests rem of rs as one, into ds: without
// counting them (cost 0) when allowed, the local part's outcome, is false.
// It reports whether all of rs are allowed.
func takeRest(ctx context.Context, inner sluice.Store, rs []sluice.Request, ds []sluice.Decision, rem []int, allowed bool) (bool, error) {
	if len(rem) == 0 {
		return allowed, nil
	}
	rrs := make([]sluice.Request, len(rem))
	rds := make([]sluice.Decision, len(rem))
	for j, i := range rem {
		rrs[j] = rs[i]
		if !allowed {
			rrs[j].Cost = 0
		}
	}
	if err := inner.TakeAll(ctx, rrs, rds); err != nil {
		return false, err
	}
	for j, i := range rem {
		ds[i] = rds[j]
	}
	return allowed && passed(rrs, rds), nil
}
