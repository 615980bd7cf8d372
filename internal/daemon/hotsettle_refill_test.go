package daemon

import (
	"testing"
	"time"
)

// An instance that has not switched yet decides on the counter a move
// left; in a steady overload that counter is out, and what it takes there
// is what the counter refills meanwhile (a bucket's tokens, a new window).
// Read as "used" (capacity less Remaining) the counter looked the same
// after as before, out, and what it gave the late instance was admitted
// again where the key went. Now each reading returns the counter's state
// and the instant it was read at, on Redis's clock, and what it holds
// less than it would have refilled to by the next reading is carried.
//
// The bound, over the whole test: what one bucket of 100/s and a burst of
// 1000 admits, burst + rate × the time elapsed on Redis's clock (which
// decides), from before the first decision to after the last, exactly: b
// takes ~100 late, 1210 of ~1112 before. Until the readings were reckoned
// on Redis's clock it needed a unit a reading and the readings' round
// trips besides (hotsettle_clock_test.go). However slowly the steps run,
// the elapsed time grows with them.
func TestAutoShardsMoveCarriesRefillTakenLate(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	const rate, burst = 100, 1000
	f := newLateFixture(t, "{name: late, rate: 100/s, burst: 1000, algorithm: token_bucket, shards: auto}")
	total := f.moveWithLateInstance(func(moved time.Time) bool { return f.redisTime().Sub(moved) >= time.Second })
	elapsed := f.redisTime().Sub(f.start)
	bound := burst + int(rate*elapsed.Seconds())
	t.Logf("admitted %d in %v (b %d of them, late on the counter left); one bucket's bound %d", total, elapsed, f.late, bound)
	if total > bound {
		t.Errorf("admitted %d in %v (b %d of them, late on the counter left), want at most one bucket's %d", total, elapsed, f.late, bound)
	}
}

// The same with a fixed window of 100 a second that ends between the move
// and b's late decisions: b takes the new window's 100 on the key's own
// counter, which the shards, seeded in the window before, admitted again
// (300 in two windows before; and, once, under load, while the settle
// took the window's turn from the readings' ResetAfter over this
// machine's clock: see hotsettle_clock_test.go). The bound: 100 for each
// window of Redis's clock the test spans, exactly, wherever the steps
// fall (a drain across a window's end spans one more).
func TestAutoShardsMoveCarriesWindowTakenLate(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	const rate = 100
	f := newLateFixture(t, "{name: late, rate: 100/s, algorithm: fixed_window, shards: auto}")
	window := func(at time.Time) int64 { return at.UnixMicro() / time.Second.Microseconds() }
	total := f.moveWithLateInstance(func(moved time.Time) bool { return window(f.redisTime()) > window(moved) })
	windows := window(f.redisTime()) - window(f.start) + 1
	t.Logf("admitted %d in %d windows (b %d of them, late on the counter left)", total, windows, f.late)
	if total > int(windows)*rate {
		t.Errorf("admitted %d in %d windows (b %d of them, late on the counter left), want at most %d", total, windows, f.late, int(windows)*rate)
	}
}

// lateFixture is a hotPair with one rule, "late", of shards: auto, and one
// key of it.
type lateFixture struct {
	*hotPair
	key   string
	keys  map[string]string
	start time.Time // Redis's clock before the first decision
	late  int       // what b admitted on the counter left
}

func newLateFixture(t *testing.T, rule string) *lateFixture {
	return newLateFixtureOn(t, rule, false)
}

// newLateFixtureOn is newLateFixture on the daemons' clock with
// requestClock (newHotPairOn).
func newLateFixtureOn(t *testing.T, rule string, requestClock bool) *lateFixture {
	f := &lateFixture{hotPair: newHotPairOn(t, "  - "+rule+"\n", requestClock)}
	r := f.a.engine().Rules().Rule("late")
	f.key = r.Name + "|" + r.Fingerprint + "|tenant"
	f.keys = map[string]string{"late": f.key}
	return f
}

// drain sends the key to d until it is refused `refusals` times in a row
// (the shards, round-robin, refuse one at a time): a steady overload.
func (f *lateFixture) drain(d *Daemon, step string, sharded bool, refusals int) int {
	f.t.Helper()
	if got := d.hot.Rule("late").IsHot(f.key); got != sharded {
		f.t.Fatalf("%s: IsHot = %v, want %v", step, got, sharded)
	}
	e := d.engine()
	admitted := 0
	for run := 0; run < refusals; {
		if e.Check(f.ctx, e.Rules().Rule("late"), f.key, 1).Allowed {
			admitted++
			run = 0
		} else {
			run++
		}
	}
	return admitted
}

// moveWithLateInstance has a drain the key's own counter, then move the
// key to its shards; once later(the instant of the move, on Redis's clock)
// holds, b, not yet switched, drains the counter the key left; then a
// refreshes (reading that counter again), b switches, and a drains the
// shards. It returns what the key admitted in all.
func (f *lateFixture) moveWithLateInstance(later func(moved time.Time) bool) int {
	f.t.Helper()
	f.refresh(f.a, f.t0, false, f.keys)
	f.refresh(f.b, f.t0, false, f.keys)
	f.start = f.redisTime()
	total := f.drain(f.a, "cold", false, 1)
	f.refresh(f.a, f.t0, true, f.keys) // a moves the key: its shards charged what its own counter used
	moved := f.redisTime()
	waitFor(f.t, "Redis's clock past the move", func() bool { return later(moved) })
	f.late = f.drain(f.b, "b, before its refresh", false, 1)
	if f.late < 50 {
		f.t.Fatalf("b admitted %d on the counter left after the move, want about 100 (what it refilled)", f.late)
	}
	total += f.late
	f.refresh(f.a, f.t0, true, f.keys) // a reads the counter left again
	f.refresh(f.b, f.t0, true, f.keys)
	return total + f.drain(f.a, "hot", true, 6)
}
