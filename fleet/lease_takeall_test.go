package fleet_test

import (
	"context"
	"math"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseTakeAllHugeCosts: the units a TakeAll needs of one key add up
// its requests' costs; costs whose sum passes the int64 range must be
// refused (they exceed the limit's capacity), not admitted on a sum that
// wrapped negative.
func TestLeaseTakeAllHugeCosts(t *testing.T) {
	srv := redistest.StartServer(t)
	l := newLease(t, openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{})
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.TokenBucket} {
		r := sluice.Request{Key: "huge/" + alg.String(), Algorithm: alg, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}
		huge := r
		huge.Cost = math.MaxInt64
		rs, ds := []sluice.Request{r, huge}, make([]sluice.Decision, 2)
		if err := l.TakeAll(ctx, rs, ds); err != nil || ds[1].Allowed {
			t.Fatalf("%s: TakeAll(cost 1, cost MaxInt64) against 10/h = %+v, %v; want the second refused", alg, ds, err)
		}
		// The key still has its 10 units: 10 requests of cost 1 pass, the
		// 11th does not.
		for i := range 11 {
			d, err := l.Take(ctx, r)
			if err != nil || d.Allowed != (i < 10) {
				t.Fatalf("%s: Take #%d after the TakeAll = %+v, %v; want allowed %v", alg, i, d, err, i < 10)
			}
		}
	}
}
