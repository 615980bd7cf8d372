package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A key of shards: auto that leaves the fleet's set and comes back while
// its counters are not at rest is charged once, not twice. The set's
// bound (maxFleetHot, the keys found hot last) can drop a key still in
// use: the instance whose exchange drops it charged the key's own
// counter, still holding what it used before the key went hot, with the
// shards' count on top, and the instance that added it back charged the
// shards, still holding theirs, with that sum on top: 40 used of 60, and
// both counters read full (0 left on each), 20 refused that
// the limit admits. A move now brings the counter it goes to up to what
// the key used, charging only what that counter lacks.
func TestAutoShardsBoundDropChargedOnce(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newSeedFixture(t)
	f.coldThenHot()
	// 1000 other keys, found hot later than this one: the set's bound
	// drops it at b's exchange.
	for i := range maxFleetHot {
		cmd := f.s.Client().B().Zadd().Key(f.set).ScoreMember().ScoreMember(4e12, fmt.Sprintf("other%d", i)).Build()
		if err := f.s.Client().Do(f.ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	f.refresh(f.b, f.t0, true)
	f.raw("dropped by the bound", 20, 20)
	if err := f.s.Client().Do(f.ctx, f.s.Client().B().Zrem().Key(f.set).Member("other0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	f.refresh(f.a, f.t0, true)
	f.raw("added back", 20, 20)
	f.decide(f.a, "hot again", 100, true)
	if f.total != 60 {
		t.Errorf("admitted %d in the window over the moves, want its limit 60", f.total)
	}
}

// A key hot again soon after it left its shards (the fleet's set keeps it
// a horizon after it was last found hot, not after its shards were last
// used) finds its shards still counting: they were charged what its own
// key had been charged from them on top (20 used of 60: 40 admitted in
// all, 20 refused); now only what they lack.
func TestAutoShardsHotAgainChargedOnce(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	f := newSeedFixture(t)
	f.refreshBoth(f.t0, false)
	f.refreshBoth(f.t0, true)
	f.decide(f.a, "hot", 20, true)
	later := f.pastHorizon()
	f.refreshBoth(later, false)
	f.raw("cold", 40, 40)
	f.refreshBoth(later, true)
	f.raw("hot again", 40, 40)
	f.decide(f.a, "hot again", 100, true)
	if f.total != 60 {
		t.Errorf("admitted %d in the window over the moves, want its limit 60", f.total)
	}
}

// seedFixture is two daemons on a 3-node Cluster with one rule,
// fixed_window of 60 a day with shards: auto, and one key of it, as in
// TestAutoShardsMoveKeepsCount (same clocks): the tests refresh the hot
// sets themselves, at their own now.
type seedFixture struct {
	*hotPair
	name, key  string
	set        string // the fleet's set of the rule
	rule       sluice.Request
	total      int // admitted
	shardCount int
}

func newSeedFixture(t *testing.T) *seedFixture {
	f := &seedFixture{hotPair: newHotPair(t, "  - {name: fixed, rate: 60/d, algorithm: fixed_window, shards: auto}\n"), name: "fixed", shardCount: 3}
	r := f.a.engine().Rules().Rule(f.name)
	f.key = r.Name + "|" + r.Fingerprint + "|tenant"
	f.set = f.a.hotPrefix + f.name
	f.rule = sluice.Request{Key: f.key, Algorithm: r.Algorithm, Limit: r.Limit}
	return f
}

// refresh refreshes d's hot sets at at, after traffic of the key seen
// elsewhere when hot.
func (f *seedFixture) refresh(d *Daemon, at time.Time, hot bool) {
	f.t.Helper()
	f.hotPair.refresh(d, at, hot, map[string]string{f.name: f.key})
}

// refreshBoth refreshes a's hot sets, then b's, at at.
func (f *seedFixture) refreshBoth(at time.Time, hot bool) {
	f.t.Helper()
	f.refresh(f.a, at, hot)
	f.refresh(f.b, at, hot)
}

// coldThenHot has instance a admit 40 of the key on its own counter, then
// both find the key hot: its shards are seeded with the 20 left.
func (f *seedFixture) coldThenHot() {
	f.t.Helper()
	f.refreshBoth(f.t0, false)
	f.decide(f.a, "cold", 40, false)
	f.refreshBoth(f.t0, true)
	f.raw("hot, seeded", 20, 20)
}

// pastHorizon moves Redis's clock on past the key's time in the fleet's
// set, for the set (the decisions' window does not move), and returns
// the now to refresh at from then on.
func (f *seedFixture) pastHorizon() time.Time {
	f.t.Helper()
	ttl := (*f.a.hotAuto.Load())[f.name]
	f.advance(f.name, ttl+time.Minute)
	return f.t0.Add(ttl + time.Minute)
}

// decide sends n requests of the key to d, sharded or not.
func (f *seedFixture) decide(d *Daemon, step string, n int, sharded bool) {
	f.t.Helper()
	if got := d.hot.Rule(f.name).IsHot(f.key); got != sharded {
		f.t.Errorf("%s: IsHot = %v, want %v", step, got, sharded)
	}
	e := d.engine()
	r := e.Rules().Rule(f.name)
	for range n {
		if e.Check(f.ctx, r, f.key, 1).Allowed {
			f.total++
		}
	}
}

// raw checks what Redis holds of the key's own counter and of its shards
// together (how the decisions spread over them is the engine's).
func (f *seedFixture) raw(step string, wantOwn, wantShards int64) {
	f.t.Helper()
	d, err := f.s.Take(f.ctx, f.rule) // cost 0: questions
	if err != nil {
		f.t.Fatal(err)
	}
	ps := f.s.Shards(f.rule, f.shardCount)
	ds := make([]sluice.Decision, len(ps))
	if err := f.s.TakeAll(f.ctx, ps, ds); err != nil {
		f.t.Fatal(err)
	}
	var rem int64
	for i := range ds {
		rem += ds[i].Remaining
	}
	if d.Remaining != wantOwn || rem != wantShards {
		f.t.Errorf("%s: Remaining of the own key %d, of the shards together %d; want %d, %d", step, d.Remaining, rem, wantOwn, wantShards)
	}
}
