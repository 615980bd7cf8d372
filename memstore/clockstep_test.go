package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// clockStepLimits are the limits of the clock step tests: a bucket's burst
// below and above its rate, a window of minutes, a counter of segments.
var clockStepLimits = []sluice.Limit{
	sluice.PerSecond(5),
	sluice.PerMinute(10).WithBurst(3),
	sluice.Every(4, 10*time.Second).WithBurst(8),
	sluice.PerMinute(6).WithSegments(3),
}

// clockSteps are how far the clock steps back: a microsecond, less than a
// spacing, about a period, several periods, an hour.
var clockSteps = []time.Duration{time.Microsecond, 150 * time.Millisecond, 10 * time.Second, 3 * time.Minute, time.Hour}

// TestClockStepBack: a key is used up to its limit at t0, then the clock
// steps back by d and requests keep coming, on the stepped-back clock,
// until it reads t0 again; other keys arrive all the while, so the store
// sweeps. No request is admitted past the limit because of the step: the
// requests before t0 get at most what a request at t0 would have found
// (nothing when the key was full), and the refusals count nothing, so the
// key recovers exactly when it would have without the step: its first
// request at t0 + RetryAfter (as decided at t0) is admitted.
func TestClockStepBack(t *testing.T) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		for _, l := range clockStepLimits {
			if windowAlg(alg) {
				l.Burst = 0 // a window takes no burst
			}
			for _, step := range clockSteps {
				for _, half := range []bool{false, true} {
					name := fmt.Sprintf("%v/%v/back=%v/half=%v", alg, l, step, half)
					t.Run(name, func(t *testing.T) { clockStepBack(t, ctx, alg, l, step, half) })
				}
			}
		}
	}
}

func clockStepBack(t *testing.T, ctx context.Context, alg sluice.Algorithm, l sluice.Limit, step time.Duration, half bool) {
	s := memstore.New(memstore.Options{Shards: 1})
	t0 := sluicetest.T0.Add(7*time.Minute + 123457*time.Microsecond)
	calls := 0
	take := func(key string, at time.Time) sluice.Decision {
		t.Helper()
		// Take and TakeAll in turn: they load and store the state apart.
		r := sluice.Request{Key: key, Algorithm: alg, Limit: l, Cost: 1, Now: at}
		var d sluice.Decision
		var err error
		if calls++; calls%2 == 0 {
			d, err = s.Take(ctx, r)
		} else {
			ds := make([]sluice.Decision, 1)
			err = s.TakeAll(ctx, []sluice.Request{r}, ds)
			d = ds[0]
		}
		if err != nil {
			t.Fatalf("Take(%s at t0%+v) = %v", key, at.Sub(t0), err)
		}
		return d
	}
	// What the key admits at t0 from fresh: its capacity at an instant.
	capacity := 0
	for take("twin", t0).Allowed {
		capacity++
	}
	used := capacity
	if half {
		used = capacity / 2
	}
	for i := range used {
		if d := take("k", t0); !d.Allowed {
			t.Fatalf("request #%d at t0 refused: %+v", i, d)
		}
	}
	// The clock steps back: requests, on the stepped-back clock, until it
	// reads t0 again, 20 of them, and 3 new keys before each (sweeps).
	admitted := used
	back := t0.Add(-step)
	for i := range 20 {
		at := back.Add(step * time.Duration(i) / 20)
		for j := range 3 {
			take(fmt.Sprintf("other-%d-%d", i, j), at)
		}
		if take("k", at).Allowed {
			admitted++
		}
	}
	if admitted > capacity {
		t.Fatalf("admitted %d requests at t0 and on the clock stepped back from it; a request at t0 alone finds %d", admitted, capacity)
	}
	if !half {
		// Full at t0: everything before t0 refused, nothing counted.
		d := take("k", t0)
		retry := d.RetryAfter
		if d.Allowed || retry <= 0 {
			t.Fatalf("full key at t0 after the step: %+v, want refused", d)
		}
		if d := take("k", t0.Add(retry-time.Microsecond)); d.Allowed {
			t.Fatalf("admitted at t0+%v, before the RetryAfter %v it had at t0", retry-time.Microsecond, retry)
		}
		// Recovered: admitted when the key allows a request again.
		if d := take("k", t0.Add(retry)); !d.Allowed {
			t.Fatalf("refused at t0+%v (RetryAfter at t0) after the clock moved forward again: %+v", retry, d)
		}
	}
}

// TestClockStepBackAfterRest: a key used up at t0 and swept once at rest
// (by the clock before the step) is forgotten; the clock then steps back
// to before its rest, and the key is found new. That admits no more than
// the limit in real time, which the step did not turn back: the key had
// rested. It admits its capacity at an instant, once.
func TestClockStepBackAfterRest(t *testing.T) {
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		l := sluice.PerMinute(10).WithBurst(3)
		if windowAlg(alg) {
			l.Burst = 0 // a window takes no burst
		}
		s := memstore.New(memstore.Options{Shards: 1})
		t0 := sluicetest.T0
		n := 0
		for {
			d, err := s.Take(ctx, sluice.Request{Key: "k", Algorithm: alg, Limit: l, Cost: 1, Now: t0})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			n++
		}
		rest := t0.Add(2 * time.Minute)
		if got := s.Sweep(rest); got != 1 {
			t.Fatalf("%v: Sweep at rest deleted %d keys, want 1", alg, got)
		}
		again := 0
		for i := range 2 * n {
			d, err := s.Take(ctx, sluice.Request{Key: "k", Algorithm: alg, Limit: l, Cost: 1, Now: t0.Add(time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				again++
			} else if i < n {
				t.Fatalf("%v: request #%d after the step back refused: %+v", alg, i, d)
			}
		}
		if again != n {
			t.Fatalf("%v: admitted %d requests after the step back, want %d (the capacity at an instant)", alg, again, n)
		}
	}
}

// windowAlg reports whether alg is a window, which takes no burst.
func windowAlg(alg sluice.Algorithm) bool {
	return alg == sluice.FixedWindow || alg == sluice.SlidingWindowLog || alg == sluice.SlidingWindowCounter
}
