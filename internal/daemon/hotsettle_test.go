package daemon

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A key that shards: auto moves is still decided on the counter it leaves
// by the instances that have not switched yet (each switches at its own
// refresh, up to a second later): what they admit there after the seed
// read that counter was not carried over, and the key admitted it again on
// its shards (70 of 60 here). The instance that moved the key reads the
// counter it left again at its next refreshes and charges what it gained
// since.
func TestAutoShardsMoveCarriesLaggingInstance(t *testing.T) {
	f := newSeedFixture(t)
	f.refreshBoth(f.t0, false)
	f.decide(f.a, "cold", 40, false)
	f.refresh(f.a, f.t0, true) // a adds the key to the fleet's set: 20 left on the shards
	f.raw("hot, seeded", 20, 20)
	f.decide(f.b, "b, before its refresh", 10, false) // on the key's own counter
	f.refreshBoth(f.t0, true)
	f.raw("b's 10 carried", 10, 10)
	f.decide(f.a, "hot", 100, true)
	if f.total != 60 {
		t.Errorf("admitted %d in the window over the move, want its limit 60", f.total)
	}
}

// The same coming back: an instance that has not yet learnt that the key
// left the fleet's set decides on its shards, and the instance that moved
// it back carries what they gained to its own counter (70 of 60 before).
func TestAutoShardsMoveBackCarriesLaggingInstance(t *testing.T) {
	f := newSeedFixture(t)
	f.refreshBoth(f.t0, true)
	f.decide(f.a, "hot", 20, true)
	later := f.pastHorizon()
	f.refresh(f.a, later, false) // a drops the key from the fleet's set: its own counter charged 20
	f.raw("cold, seeded", 40, 40)
	f.decide(f.b, "b, before its refresh", 10, true) // on the shards
	f.refreshBoth(later, false)
	f.raw("b's 10 carried", 30, 30)
	f.decide(f.a, "cold", 100, false)
	if f.total != 60 {
		t.Errorf("admitted %d in the window over the moves, want its limit 60", f.total)
	}
}

// refilled, for every algorithm and a counter left as a run of decisions
// and forced charges (debt) left it: what it says a counter that answered
// d would answer dt later, having taken nothing, is never more than the
// counter answers then (a settle never charges what was not taken), and
// for the buckets and the fixed window at most a unit less; the sliding
// windows are not modelled (as at d).
func TestRefilledNeverOverstates(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, a := range sluice.Algorithms() {
		for range 2000 {
			l := sluice.Limit{Rate: 1 + rng.Int64N(200), Period: time.Duration(1+rng.Int64N(60_000)) * time.Millisecond}
			if rng.IntN(2) == 0 && a.TakesBurst() { // a window takes no burst
				l.Burst = 1 + rng.Int64N(400)
			}
			q := sluice.Request{Algorithm: a, Limit: l}
			var st sluice.State
			now := t0
			for range rng.IntN(30) {
				now = now.Add(time.Duration(rng.Int64N(int64(l.Period / 4))))
				cost := 1 + rng.Int64N(max(1, l.Rate/3))
				var err error
				if rng.IntN(8) == 0 {
					_, _, err = a.Charge(&st, l, now, cost)
				} else {
					_, _, err = a.Take(&st, l, now, cost)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			d1, _, err := a.Take(&st, l, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			dt := time.Duration(rng.Int64N(int64(2 * l.Period)))
			d2, _, err := a.Take(&st, l, now.Add(dt), 0)
			if err != nil {
				t.Fatal(err)
			}
			got := refilled(q, d1, dt)
			modelled := a != sluice.SlidingWindowLog && a != sluice.SlidingWindowCounter
			if got > d2.Remaining || modelled && got < d2.Remaining-1 {
				t.Fatalf("%v %v: answered %+v, then %v later %+v; refilled says %d", a, l, d1, dt, d2, got)
			}
		}
	}
}
