package fleet_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestOverLimitTakeAllSameKey: a TakeAll with two requests of one key
// decides the second on the state the first would leave; when it is
// refused, nothing is counted, so that refusal says nothing of the key's
// real state and must not be remembered: a Take of the same cost that the
// store admits must not be refused from the cache.
func TestOverLimitTakeAllSameKey(t *testing.T) {
	srv := redistest.StartServer(t)
	c := fleet.NewOverLimitCache(fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}}), fleet.OverLimitOptions{})
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA, sluice.TokenBucket, sluice.SlidingWindowLog} {
		r := sluice.Request{Key: "same/" + alg.String(), Algorithm: alg, Limit: sluice.PerHour(1), Cost: 1, Now: sluicetest.T0}
		rs, ds := []sluice.Request{r, r}, make([]sluice.Decision, 2)
		if err := c.TakeAll(ctx, rs, ds); err != nil || ds[0].Allowed == ds[1].Allowed || ds[1].Allowed {
			t.Fatalf("%s: TakeAll(the key twice, 1/h) = %+v, %v; want the first allowed, the second refused", alg, ds, err)
		}
		if d, err := c.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("%s: Take after the refused TakeAll = %+v, %v (cache hits %d); want allowed: the TakeAll counted nothing", alg, d, err, c.Hits())
		}
	}
}
