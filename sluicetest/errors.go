package sluicetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testErrors: an invalid request is an error of its own kind, checkable
// with errors.Is on the sentinel the Store and Request docs name, never one
// wrapping sluice.ErrStoreUnavailable (which a caller may fail open on);
// and it counts nothing, alone or in a TakeAll beside valid requests. So
// is a TakeAll given fewer or more decisions than requests.
func testErrors(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		lim := sluice.PerSecond(2)
		key := uniq(t, alg.String())
		good := sluice.Request{Key: key, Algorithm: alg, Limit: lim, Cost: 1, Now: T0}
		bad := func(change func(r *sluice.Request)) sluice.Request {
			r := good
			change(&r)
			return r
		}
		cases := []struct {
			what string
			r    sluice.Request
			want error
		}{
			{"rate 0", bad(func(r *sluice.Request) { r.Limit.Rate = 0 }), sluice.ErrInvalidLimit},
			{"period 0", bad(func(r *sluice.Request) { r.Limit.Period = 0 }), sluice.ErrInvalidLimit},
			{"burst -1", bad(func(r *sluice.Request) { r.Limit.Burst = -1 }), sluice.ErrInvalidLimit},
			{"cost -1", bad(func(r *sluice.Request) { r.Cost = -1 }), sluice.ErrInvalidCost},
			{"forced cost -1", bad(func(r *sluice.Request) { r.Cost, r.Force = -1, true }), sluice.ErrInvalidCost},
			{"algorithm 0", bad(func(r *sluice.Request) { r.Algorithm = 0 }), sluice.ErrUnknownAlgorithm},
			{"the zero Now", bad(func(r *sluice.Request) { r.Now = time.Time{} }), sluice.ErrInvalidTime},
			{"Now after MaxTime", bad(func(r *sluice.Request) { r.Now = sluice.MaxTime.Add(time.Second) }), sluice.ErrInvalidTime},
		}
		if isWindow(alg) {
			// A window admits its rate each period: a burst would never apply.
			cases = append(cases, struct {
				what string
				r    sluice.Request
				want error
			}{"burst 3 on a rate of 2", bad(func(r *sluice.Request) { r.Limit.Burst = 3 }), sluice.ErrInvalidLimit})
		}
		for _, tc := range cases {
			check := func(call string, err error) {
				t.Helper()
				switch {
				case err == nil:
					t.Errorf("%s %s with %s: got no error, want one wrapping %v", call, alg, tc.what, tc.want)
				case errors.Is(err, sluice.ErrStoreUnavailable):
					t.Errorf("%s %s with %s = %v: an invalid request wraps ErrStoreUnavailable", call, alg, tc.what, err)
				case !errors.Is(err, tc.want):
					t.Errorf("%s %s with %s = %v, want an error wrapping %v", call, alg, tc.what, err, tc.want)
				}
			}
			r := tc.r
			r.Key = key + "/take"
			_, err := s.Take(ctx, r)
			check("Take", err)
			r.Key = key + "/all"
			ds := make([]sluice.Decision, 2)
			check("TakeAll", s.TakeAll(ctx, []sluice.Request{good, r}, ds))
			check("TakeAll (first)", s.TakeAll(ctx, []sluice.Request{r, good}, ds))
		}
		// Decisions fewer or more than the requests: an error, not a
		// panic, never a store failure, and nothing counted.
		for _, n := range []int{0, 1, 3} {
			err := s.TakeAll(ctx, []sluice.Request{good, good}, make([]sluice.Decision, n))
			if err == nil || errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Errorf("TakeAll %s of 2 requests into %d decisions = %v, want an error that is not ErrStoreUnavailable", alg, n, err)
			}
		}
		// Nothing was counted: neither the valid request beside the
		// invalid ones nor, where the store could read a key, theirs.
		for _, k := range []string{key, key + "/take", key + "/all"} {
			r := good
			r.Key = k
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatalf("Take %s %q after the invalid requests: %v", alg, k, err)
			}
			if want := lim.BurstOrRate() - 1; alg != sluice.LeakyBucket && (!d.Allowed || d.Remaining != want) {
				t.Errorf("Take %s %q after the invalid requests = %+v, want allowed with Remaining %d: an invalid request was counted", alg, k, d, want)
			} else if alg == sluice.LeakyBucket && (!d.Allowed || d.Delay != 0) {
				t.Errorf("Take %s %q after the invalid requests = %+v, want allowed with no delay: an invalid request was counted", alg, k, d)
			}
		}
	}
}
