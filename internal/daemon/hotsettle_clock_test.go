package daemon

import (
	"testing"
	"time"
)

// TestAutoShardsMoveCarriesRefillTakenLate and …WindowTakenLate on the
// daemons' clock (newLateFixtureOn), each step at an instant the test
// sets, so the counter's clock runs apart from this machine's: a settle
// that timed its readings here (the first's answer to the second's
// question) took the counter a move left as not refilled, a second on,
// and carried nothing of what b took there. On Redis's clock the same
// befell a window that turned less than the readings' round trips before
// the second reading: a loaded machine (2 cores, other tests beside)
// admitted 300 in two windows of 100. The settle reads each counter's
// state and the instant it read it at, on the clock its decisions use.

// A fixed window of 100 a second: a takes 100 at a window's start and
// moves the key; half a window into the next one, b takes that window's
// 100 on the key's own counter, a settles, and a drains the shards, in
// the same window. 100 a window, exactly (300 before: the shards, seeded
// in the window before, admitted the new window's 100 again).
func TestAutoShardsMoveCarriesWindowTakenLateOnItsClock(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	const rate = 100
	f := newLateFixtureOn(t, "{name: late, rate: 100/s, algorithm: fixed_window, shards: auto}", true)
	start := f.t0.Truncate(time.Second) // a window's start
	lateAt := start.Add(3 * time.Second / 2)
	total := f.moveLateOn(start, lateAt, lateAt.Add(time.Second/8))
	t.Logf("admitted %d in 2 windows (b %d of them, late on the counter left)", total, f.late)
	if total > 2*rate {
		t.Errorf("admitted %d in 2 windows (b %d of them, late on the counter left), want at most %d", total, f.late, 2*rate)
	}
}

// A bucket of 100/s and a burst of 1000: a takes 1000 and moves the key;
// a second later b takes the 100 it refilled, a settles, and a drains the
// shards at once. One bucket's 1000 + 100 (1200 before: the shards
// refilled the same 100 and admitted it again).
func TestAutoShardsMoveCarriesRefillTakenLateOnItsClock(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	const rate, burst = 100, 1000
	f := newLateFixtureOn(t, "{name: late, rate: 100/s, burst: 1000, algorithm: token_bucket, shards: auto}", true)
	start := f.t0
	lateAt := start.Add(time.Second)
	total := f.moveLateOn(start, lateAt, lateAt)
	bound := burst + rate*int(lateAt.Sub(start)/time.Second)
	t.Logf("admitted %d in %v (b %d of them, late on the counter left); one bucket's bound %d", total, lateAt.Sub(start), f.late, bound)
	if total > bound {
		t.Errorf("admitted %d in %v (b %d of them, late on the counter left), want at most one bucket's %d", total, lateAt.Sub(start), f.late, bound)
	}
}

// moveLateOn is moveWithLateInstance on the daemons' clock: a drains the
// key's own counter and moves the key at start; b, not yet switched,
// drains the counter left at lateAt; a refreshes (reading that counter
// again) and b switches then; a drains the shards at end. It returns
// what the key admitted in all.
func (f *lateFixture) moveLateOn(start, lateAt, end time.Time) int {
	f.t.Helper()
	f.refresh(f.a, start, false, f.keys)
	f.refresh(f.b, start, false, f.keys)
	f.setNow(start)
	total := f.drain(f.a, "cold", false, 1)
	f.refresh(f.a, start, true, f.keys) // a moves the key: its shards charged what its own counter used
	f.setNow(lateAt)
	f.late = f.drain(f.b, "b, before its refresh", false, 1)
	if f.late < 50 {
		f.t.Fatalf("b admitted %d on the counter left after the move, want about 100 (what it refilled)", f.late)
	}
	f.refresh(f.a, lateAt, true, f.keys) // a reads the counter left again
	f.refresh(f.b, lateAt, true, f.keys)
	f.setNow(end)
	return total + f.late + f.drain(f.a, "hot", true, 6)
}
