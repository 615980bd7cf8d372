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
			if !a.TakesBurst() {
				l.Burst = 0 // a window takes no burst
			}
			key := fmt.Sprintf("twin/%d/%s/%d", time.Now().UnixNano(), a, li)
			tk, _ := l.Ticks()
			var want sluice.State
			now := sluicetest.T0.UnixMicro()
			clock := now // the latest hit's time
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
					h := redisstore.Hit{At: now - rng.Int64N(int64(l.Period/time.Microsecond)), Cost: randomCost(rng, a, &tk)}
					if (a == sluice.TokenBucket || a == sluice.GCRA) && h.At > clock && rng.IntN(3) == 0 {
						// A folded hit: a span from after the state's
						// last hit, a net cost, a floor.
						h.From = clock + 1 + rng.Int64N(h.At-clock)
						h.Cost = rng.Int64N(8*tk.Period) - 5*tk.Period
						h.Floor = rng.Int64N(3 * tk.Period)
					}
					hits = append(hits, h)
					clock = max(clock, h.At)
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

// randomCost is a hit's cost of 1 to 3 requests; for a bucket, any debt
// up to that, whole requests or not (folded hits carry parts).
func randomCost(rng *rand.Rand, a sluice.Algorithm, tk *sluice.Ticks) int64 {
	if a == sluice.TokenBucket || a == sluice.GCRA {
		return 1 + rng.Int64N(3*tk.Period)
	}
	return 1 + rng.Int64N(3)
}

// TestFoldExact: a bucket's hits folded down to a few leave exactly the
// state the whole list leaves, from random states, for hits close together
// and hours apart, in order or not.
func TestFoldExact(t *testing.T) {
	seed := sluicetest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	limits := []sluice.Limit{sluice.PerSecond(7), sluice.PerMinute(100).WithBurst(30), sluice.PerDay(1_000_000), sluice.Every(3, 250*time.Millisecond), sluice.PerHour(1)}
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		for li, l := range limits {
			tk, err := l.Ticks()
			if err != nil {
				t.Fatal(err)
			}
			period := int64(l.Period / time.Microsecond)
			for trial := range 300 {
				now := sluicetest.T0.UnixMicro()
				var start sluice.State
				for range rng.IntN(4) {
					now += rng.Int64N(period)
					addHit(a, &tk, &start, redisstore.Hit{At: now, Cost: rng.Int64N(2*l.Rate+1) * tk.Period})
				}
				// The state's clock is not past the first hit (see fold).
				base := now
				var hits []redisstore.Hit
				for range 1 + rng.IntN(200) {
					switch rng.IntN(4) {
					case 0: // same instant
					case 1:
						now += rng.Int64N(period / max(1, l.Rate))
					case 2:
						now += rng.Int64N(3 * period)
					default:
						now -= rng.Int64N(period / 2) // another request's clock, behind
					}
					cost := randomCost(rng, a, &tk)
					if rng.IntN(10) == 0 { // a report of up to twice the burst
						cost = rng.Int64N(2*tk.Burst+1) * tk.Period
					}
					hits = append(hits, redisstore.Hit{At: max(now, base), Cost: cost})
				}
				// A hit adds what its request added to the instance's
				// view, which stops at the cap (see decide).
				limit, _ := chargeCap(a, &tk)
				want := start
				for i := range hits {
					d := debtAt(a, &tk, &want, floorDiv(hits[i].At, tk.Tick))
					hits[i].Cost = max(0, min(hits[i].Cost, limit-d))
					addHit(a, &tk, &want, hits[i])
				}
				keep := 1 + rng.IntN(8)
				folded := append([]redisstore.Hit(nil), hits...)
				inOrder(folded)
				folded = fold(a, &tk, folded, keep)
				if len(folded) > keep {
					t.Fatalf("%d hits folded to %d, want at most %d", len(hits), len(folded), keep)
				}
				got := start
				for _, h := range folded {
					addHit(a, &tk, &got, h)
				}
				if got.T != want.T || got.N != want.N || got.M != want.M {
					t.Fatalf("%s %v (limit %d) trial %d (seed %d): %d hits from %+v leave %+v, folded to %d they leave %+v", a, l, li, trial, seed, len(hits), start, want, len(folded), got)
				}
			}
		}
	}
}

// TestSyncScriptTwinFarBack: a GCRA hit far older than the state's last
// (an instance's batch late by hours, or a clock behind) meets a debt at
// its time beyond 2^53 token-ticks, which Lua's doubles do not hold
// exactly: the script must still leave the state Go leaves (found by a
// random seed of TestSyncScriptTwin: N off by one).
func TestSyncScriptTwinFarBack(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := sluice.PerDay(1_000_000)
	tk, _ := l.Ticks()
	limit, _ := chargeCap(sluice.GCRA, &tk)
	t1 := sluicetest.T0.UnixMicro()
	for _, back := range []time.Duration{13 * time.Hour, 23*time.Hour + 59*time.Minute, time.Hour} {
		key := fmt.Sprintf("twin-far/%d/%d", time.Now().UnixNano(), back)
		var want sluice.State
		steps := [][]redisstore.Hit{
			{{At: t1, Cost: limit - 1}}, // the debt just under its cap, an odd remainder
			{{At: t1 - back.Microseconds(), Cost: 7305221545}},
			{{At: t1 + 1, Cost: 3}, {At: t1 - back.Microseconds() - 7, Cost: 22433542156}},
		}
		for i, hits := range steps {
			for _, h := range hits {
				addHit(sluice.GCRA, &tk, &want, h)
			}
			ops := []redisstore.SyncOp{{Key: key, Algorithm: sluice.GCRA, Limit: l, Hits: hits}}
			if err := rs.Sync(ctx, ops); err != nil {
				t.Fatal(err)
			}
			if got := ops[0].State; got.T != want.T || got.N != want.N || got.M != want.M {
				t.Fatalf("%v back, step %d: hits %v: Redis state %+v, Go %+v", back, i, hits, got, want)
			}
		}
	}
}

// grantStep is the Go twin of fleet.lua's grant of a bucket (after the
// units given back): up to want units at us (µs), what the debt leaves
// under the burst. It returns the units granted.
func grantStep(a sluice.Algorithm, t *sluice.Ticks, st *sluice.State, us, want int64) int64 {
	now := floorDiv(us, t.Tick)
	d := debtAt(a, t, st, now)
	avail := min(want, max(0, floorDiv(t.Burst*t.Period-d, t.Period)))
	setDebt(a, t, st, now, d+avail*t.Period)
	if a == sluice.GCRA && avail > 0 {
		st.M = max(st.M, now)
	}
	return avail
}

// TestLeaseScriptTwinFarBack: a grant (with units given back first or
// not), a give-back or an exact take at a time far behind the state's T
// (an instance whose clock is behind by an hour or more) meets a GCRA debt
// at its time beyond 2^53 token-ticks, which Lua's doubles do not hold
// exactly: the script must leave the state Go leaves (the far-back hit of
// TestSyncScriptTwinFarBack, in the other modes).
func TestLeaseScriptTwinFarBack(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := sluice.PerDay(1_000_000)
	tk, _ := l.Ticks()
	limit, _ := chargeCap(sluice.GCRA, &tk)
	t1 := sluicetest.T0.UnixMicro()
	for _, back := range []time.Duration{13 * time.Hour, 23*time.Hour + 59*time.Minute, time.Hour + 7*time.Minute} {
		at := t1 - back.Microseconds()
		for _, mode := range []string{"grant", "grant after a give-back", "return", "take"} {
			key := fmt.Sprintf("twin-far-lease/%d/%d", time.Now().UnixNano(), back)
			// The debt just under its cap at t1, an odd remainder.
			var want sluice.State
			hit := redisstore.Hit{At: t1, Cost: limit - 1}
			addHit(sluice.GCRA, &tk, &want, hit)
			if err := rs.Sync(ctx, []redisstore.SyncOp{{Key: key, Algorithm: sluice.GCRA, Limit: l, Hits: []redisstore.Hit{hit}}}); err != nil {
				t.Fatal(err)
			}
			r := sluice.Request{Key: key, Algorithm: sluice.GCRA, Limit: l, Cost: 5, Now: time.UnixMicro(at)}
			var got sluice.State
			var err error
			switch mode {
			case "grant", "grant after a give-back":
				var units int64
				if mode != "grant" {
					units = 3
				}
				giveBack(sluice.GCRA, &tk, &want, units, 0, at)
				n := grantStep(sluice.GCRA, &tk, &want, at, r.Cost)
				var g redisstore.Grant
				if g, err = rs.Lease(ctx, r, redisstore.ReturnOp{Units: units}); err == nil && g.Units != n {
					t.Errorf("%v back, %s: %d units granted, Go %d", back, mode, g.Units, n)
				}
				got = g.State
			case "return":
				giveBack(sluice.GCRA, &tk, &want, 2, 0, at)
				if err = rs.Return(ctx, []redisstore.ReturnOp{{Key: key, Algorithm: sluice.GCRA, Limit: l, Units: 2, Now: r.Now}}); err == nil {
					// Read the state back: a take of cost 0 at t1.
					var tk redisstore.Taken
					_, tk, err = rs.SyncTake(ctx, sluice.Request{Key: key, Algorithm: sluice.GCRA, Limit: l, Now: time.UnixMicro(t1)})
					got = tk.State
				}
			case "take": // sluice's GCRA step
				r.Cost = 1
				var d sluice.Decision
				if _, err := sluice.GCRA.TakeMicro(&d, &want, &l, at, r.Cost); err != nil {
					t.Fatal(err)
				}
				var tk redisstore.Taken
				_, tk, err = rs.SyncTake(ctx, r)
				got = tk.State
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.T != want.T || got.N != want.N || got.M != want.M {
				t.Errorf("%v back, %s: Redis state %+v, Go %+v", back, mode, got, want)
			}
		}
	}
}
