package daemon

import (
	"testing"
	"time"
)

// An instance whose exchange keeps failing decides on the counter a move
// left for longer than the two readings after the move: b here misses
// three of a's refreshes, taking a token bucket's refill (~100 a second)
// before each. a kept reading the counter left only twice, so b's third
// take was admitted again on the shards (~500 in ~3 s before, where one
// bucket of 100/s and 100 admits ~400). a now reads on while a reading
// finds something taken there.
func TestAutoShardsMoveCarriesInstanceLaterStill(t *testing.T) {
	t.Parallel() // a Cluster and daemons of its own
	const rate, burst = 100, 100
	f := newLateFixture(t, "{name: late, rate: 100/s, burst: 100, algorithm: token_bucket, shards: auto}")
	f.refresh(f.a, f.t0, false, f.keys)
	f.refresh(f.b, f.t0, false, f.keys)
	f.start = f.redisTime()
	total := f.drain(f.a, "cold", false, 1)
	f.refresh(f.a, f.t0, true, f.keys) // a moves the key: its shards charged its 100
	for round := range 3 {
		since := f.redisTime()
		waitFor(t, "Redis's clock a second on", func() bool { return f.redisTime().Sub(since) >= time.Second })
		late := f.drain(f.b, "b, its exchange failing", false, 1)
		if late < rate/2 {
			t.Fatalf("round %d: b admitted %d on the counter left, want about %d (its refill)", round, late, rate)
		}
		f.late += late
		f.refresh(f.a, f.t0, true, f.keys) // a reads the counter left again
	}
	f.refresh(f.b, f.t0, true, f.keys) // b's exchange succeeds at last
	total += f.late + f.drain(f.a, "hot", true, 6)
	elapsed := f.redisTime().Sub(f.start)
	// As TestAutoShardsMoveCarriesRefillTakenLate: one bucket's, exactly
	// (a unit per reading and the readings' round trips more, until the
	// readings were reckoned on Redis's clock).
	bound := burst + int(rate*elapsed.Seconds())
	t.Logf("admitted %d in %v (b %d of them, late on the counter left); one bucket's bound %d", total, elapsed, f.late, bound)
	if total > bound {
		t.Errorf("admitted %d in %v (b %d of them, late on the counter left), want at most one bucket's %d", total, elapsed, f.late, bound)
	}
}
