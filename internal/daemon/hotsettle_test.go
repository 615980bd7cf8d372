package daemon

import "testing"

// A key that shards: auto moves is still decided on the counter it leaves
// by the instances that have not switched yet (each switches at its own
// refresh, up to a second later): what they admit there after the seed
// read that counter was not carried over, and the key admitted it again on
// its shards (70 of 60 here). The instance that moved the key reads the
// counter it left again at its next refreshes and charges what it gained
// since.
func TestAutoShardsMoveCarriesLaggingInstance(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
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
	t.Parallel() // a Cluster and daemons of its own
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
