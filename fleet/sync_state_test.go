package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncScriptTwin checks that fleet.lua's sync and return steps move a
// key's state exactly as addHit and giveBack do, on random hits (some out of
// order, as from instances whose batches cross) for every algorithm the
// fleet shares.
func TestSyncScriptTwin(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	seed := sluicetest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	limits := []sluice.Limit{sluice.PerSecond(7), sluice.PerMinute(100).WithBurst(30), sluice.PerDay(1_000_000), sluice.Every(3, 250*time.Millisecond)}
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindowCounter} {
		for li, l := range limits {
			key := fmt.Sprintf("twin/%d/%s/%d", time.Now().UnixNano(), a, li)
			tk, _ := l.Ticks()
			var want sluice.State
			now := sluicetest.T0.UnixMicro()
			for step := range 60 {
				now += rng.Int64N(int64(l.Period/time.Microsecond)) / 4
				if rng.IntN(5) == 0 { // give back
					units, w := rng.Int64N(5), want.T-rng.Int64N(2)
					giveBack(a, &tk, &want, units, w, now)
					err := rs.Return(ctx, []redisstore.ReturnOp{{Key: key, Algorithm: a, Limit: l, Units: units, Window: w, Now: time.UnixMicro(now)}})
					if err != nil {
						t.Fatal(err)
					}
				}
				var hits []redisstore.Hit
				for range rng.IntN(4) {
					hits = append(hits, redisstore.Hit{At: now - rng.Int64N(int64(l.Period/time.Microsecond)), Cost: 1 + rng.Int64N(3)})
				}
				for _, h := range hits {
					addHit(a, &tk, &want, h)
				}
				ops := []redisstore.SyncOp{{Key: key, Algorithm: a, Limit: l, Hits: hits}}
				if err := rs.Sync(ctx, ops); err != nil {
					t.Fatal(err)
				}
				if got := ops[0].State; got.T != want.T || got.N != want.N || got.M != want.M {
					t.Fatalf("%s %v step %d (seed %d): hits %v: Redis state %+v, Go %+v", a, l, step, seed, hits, ops[0].State, want)
				}
			}
		}
	}
}
