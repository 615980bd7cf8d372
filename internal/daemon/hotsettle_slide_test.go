package daemon

import (
	"testing"
	"time"
)

// The sliding windows' counterparts of TestAutoShardsMoveCarriesRefillTakenLate:
// b, not yet switched, takes on the counter the key left what slid out of
// its window after the move; the shards, seeded with what the key had used,
// slide the same way and would admit it again. A reading's Remaining and
// ResetAfter do not tell when each unit leaves a sliding window, so the
// settle carried nothing of it.
//
// They decide on the daemons' clock (newLateFixtureOn), each step at an
// instant the test sets: on Redis's, which a test cannot move, the steps
// between b's drain and a's had to end within a window's margin, which a
// loaded machine missed. The settle reads and charges on the clock the
// decisions use, whichever it is (hotsettle.go).

// A sliding log of 100 in 4 s: a takes 50, then 50 two seconds later, and
// moves the key; once the first 50 have left the window, b takes them on
// the key's own counter; once the seed's units have left the shards, two
// seconds later, a drains the shards. b's units are still in the window
// then: together b and a get at most 100 (150 before: the shards admitted
// b's 50 again).
func TestAutoShardsMoveCarriesLogSlidLate(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	const rate, period = 100, 4 * time.Second
	f := newLateFixtureOn(t, "{name: late, rate: 100/4s, algorithm: sliding_window_log, shards: auto}", true)
	first := f.t0 // the first half's units logged then
	f.refresh(f.a, first, false, f.keys)
	f.refresh(f.b, first, false, f.keys)
	f.take(f.a, "cold, first half", rate/2)
	moved := first.Add(period / 2)
	f.setNow(moved)
	f.take(f.a, "cold, second half", rate/2)
	f.refresh(f.a, moved, true, f.keys) // a moves the key: its shards charged its 100
	// The first half out of the window.
	lateAt := first.Add(period + period/8)
	f.setNow(lateAt)
	f.late = f.drain(f.b, "b, before its refresh", false, 1)
	if f.late < rate/2 {
		t.Fatalf("b admitted %d on the counter left, want at least the %d slid out", f.late, rate/2)
	}
	f.refresh(f.a, lateAt, true, f.keys) // a reads the counter left again
	f.refresh(f.b, lateAt, true, f.keys)
	end := moved.Add(period + period/8) // the seed out of the shards' window; b's units in it
	f.setNow(end)
	hot := f.drain(f.a, "hot", true, 6)
	t.Logf("b admitted %d late, a %d on the shards %v later, in one window", f.late, hot, end.Sub(lateAt))
	if f.late+hot > rate {
		t.Errorf("b admitted %d late and a %d on the shards within one window of %d", f.late, hot, rate)
	}
}

// A sliding window counter of 100 in 4 s (one segment): a takes 100 and
// moves the key; half-way through the next window, b takes on the key's own
// counter what the previous window's weight has shed (~50); then a drains
// the shards, which shed the same, an eighth of the window later. The
// estimate over the key's counters together stays within 100: b and a get
// at most what the window shed by the end (~62), not that and b's 50 again.
func TestAutoShardsMoveCarriesCounterSlidLate(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	counterSlidLate(t, "rate: 100/4s", 4*time.Second, 1)
}

// The same with two segments of 4 s: a's 100 shed as their sub-window
// is the oldest, two sub-windows on. The store's answer tells when the
// counter is full again, not what it sheds before (~105 before, where it
// shed ~52).
func TestAutoShardsMoveCarriesSegmentsSlidLate(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	counterSlidLate(t, "rate: 100/8s, segments: 2", 8*time.Second, 2)
}

// counterSlidLate runs the counter tests: a rule of 100 a period (limit,
// as the config writes it) in segments sub-windows, on the daemons' clock.
// a takes its 100 at the start of a sub-window; from half the sub-window
// that sheds them, b drains the counter left and both refresh; a drains
// the shards an eighth of a sub-window later, in the same one.
func counterSlidLate(t *testing.T, limit string, period time.Duration, segments int64) {
	const rate = 100
	f := newLateFixtureOn(t, "{name: late, "+limit+", algorithm: sliding_window_counter, shards: auto}", true)
	sub := period / time.Duration(segments)
	window := func(at time.Time) int64 { return at.UnixMicro() / sub.Microseconds() }
	f.refresh(f.a, f.t0, false, f.keys)
	f.refresh(f.b, f.t0, false, f.keys)
	start := time.UnixMicro((window(f.t0) + 1) * sub.Microseconds()) // the start of a sub-window
	f.setNow(start)
	f.take(f.a, "cold", rate)
	f.refresh(f.a, start, true, f.keys) // a moves the key: its shards charged its 100
	// a's sub-window is the oldest from next on, weighed out over a sub-window.
	shedding := window(start) + segments
	next := time.UnixMicro(shedding * sub.Microseconds())
	lateAt := next.Add(sub / 2)
	f.setNow(lateAt)
	f.late = f.drain(f.b, "b, before its refresh", false, 1)
	f.refresh(f.a, lateAt, true, f.keys) // a reads the counter left again
	f.refresh(f.b, lateAt, true, f.keys)
	end := lateAt.Add(sub / 8)
	f.setNow(end)
	hot := f.drain(f.a, "hot", true, 6)
	// What a's 100 weigh at end, floored as the estimate is.
	left := rate * (next.Add(sub).Sub(end)).Microseconds() / sub.Microseconds()
	shed := rate - left
	t.Logf("b admitted %d late, a %d on the shards; the window had shed %d", f.late, hot, shed)
	if f.late < int(rate/4) {
		t.Fatalf("b admitted %d on the counter left, want about %d (what it shed)", f.late, rate/2)
	}
	// Each shard floors its own estimate: up to a unit more each (3).
	if bound := int(shed) + 3; f.late+hot > bound {
		t.Errorf("b admitted %d late and a %d on the shards, want at most what the window shed, %d (and a unit per shard)", f.late, hot, bound)
	}
}

// take has d admit n of the key, failing on a refusal.
func (f *lateFixture) take(d *Daemon, step string, n int) {
	f.t.Helper()
	e := d.engine()
	for i := range n {
		if !e.Check(f.ctx, e.Rules().Rule("late"), f.key, 1).Allowed {
			f.t.Fatalf("%s: refused after %d of %d", step, i, n)
		}
	}
}
