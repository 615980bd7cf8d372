package sluice_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// checkWaitsBehind decides a request of cost at now on a copy of st (Charge
// with force) and checks its waits on the state it leaves, on now's own
// clock: if refused, a request of the same cost (1 after a charge) is
// admitted RetryAfter later, and with exact (microsecond ticks) not a
// microsecond sooner; after ResetAfter the limit is full again. It reports
// whether the request was refused with a finite RetryAfter.
func checkWaitsBehind(t *testing.T, alg sluice.Algorithm, l sluice.Limit, st sluice.State, now time.Time, cost int64, force, exact bool) bool {
	t.Helper()
	take := alg.Take
	if force {
		take = alg.Charge
	}
	after := st.Clone()
	d, _, err := take(&after, l, now, cost)
	if err != nil {
		t.Fatalf("%s %v: %v", alg, l, err)
	}
	at := func(off time.Duration, cost int64) sluice.Decision {
		c := after.Clone()
		d, _, _ := alg.Take(&c, l, now.Add(off), cost)
		return d
	}
	fresh := sluice.State{}
	full, _, _ := alg.Take(&fresh, l, now, 0)
	if got := at(d.ResetAfter, 0); got.Remaining != full.Remaining {
		t.Errorf("%s %v (burst %d) state %+v, cost %d (force %v) at %v: ResetAfter %v, but then Remaining is %d, want %d as for a new key",
			alg, l, l.Burst, st, cost, force, now.UnixMicro(), d.ResetAfter, got.Remaining, full.Remaining)
	}
	if d.Allowed || d.RetryAfter == sluice.Never {
		return false
	}
	want := cost
	if force {
		want = 1 // a charge's RetryAfter is for a request of cost 1
	}
	if got := at(d.RetryAfter, want); !got.Allowed {
		t.Errorf("%s %v (burst %d) state %+v, cost %d (force %v) at %v: refused with RetryAfter %v, but refused again then (%+v)",
			alg, l, l.Burst, st, cost, force, now.UnixMicro(), d.RetryAfter, got)
	}
	if exact && d.RetryAfter >= time.Microsecond {
		if got := at(d.RetryAfter-time.Microsecond, want); got.Allowed {
			t.Errorf("%s %v (burst %d) state %+v, cost %d (force %v) at %v: RetryAfter %v, but admitted 1 µs sooner",
				alg, l, l.Burst, st, cost, force, now.UnixMicro(), d.RetryAfter)
		}
	}
	return true
}

// TestWaitsWithClockBehind: a request whose clock is behind the key's
// state (two instances whose clocks differ, deciding on one Redis key each
// with its own Now) is refused with a RetryAfter after which, on its own
// clock, it is admitted, and a ResetAfter after which the limit is full.
// The token bucket counted the refill from its own now, where it runs from
// the last refill (ahead of it); the sliding log and the sliding window
// counter count such a request at the state's time, but reported their
// waits from that time: at +100 s on a token bucket of 1 per 100 s last
// touched at +150 s, RetryAfter was 100 s, and the retry was refused for
// another 50 s.
func TestWaitsWithClockBehind(t *testing.T) {
	t.Run("probe", func(t *testing.T) {
		l := sluice.Every(1, 100*time.Second)
		for _, alg := range sluice.Algorithms() {
			var st sluice.State
			if d, _, _ := alg.Take(&st, l, sluicetest.T0.Add(150*time.Second), 1); !d.Allowed {
				t.Fatalf("%s: the first request was refused", alg)
			}
			if alg == sluice.LeakyBucket { // the queue holds one more
				alg.Take(&st, l, sluicetest.T0.Add(150*time.Second), 1)
			}
			if !checkWaitsBehind(t, alg, l, st, sluicetest.T0.Add(100*time.Second), 1, false, true) {
				t.Errorf("%s: a request 50 s behind a full key was not refused", alg)
			}
		}
	})
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		limits := []sluice.Limit{sluice.PerSecond(3), sluice.PerMinute(10).WithBurst(4), sluice.Every(5, 250*time.Millisecond).WithBurst(2),
			sluice.PerSecond(7).WithBurst(12), sluice.PerMinute(10).WithSegments(4), sluice.Every(9, 1200*time.Millisecond).WithSegments(3)}
		for _, alg := range sluice.Algorithms() {
			t.Run(alg.String(), func(t *testing.T) {
				refused := 0
				for _, l := range limits {
					if refusesBurst(alg, l) {
						continue // a window takes no burst
					}
					for range 300 {
						st, now := behindState(rng, alg, l)
						var skew time.Duration
						switch rng.IntN(3) {
						case 0:
							skew = time.Duration(rng.Int64N(1000)) * time.Microsecond
						case 1:
							skew = time.Duration(rng.Int64N(int64(l.Period)/1000)) * time.Microsecond
						default:
							skew = time.Duration(rng.Int64N(3*int64(l.Period)/1000)) * time.Microsecond
						}
						cost := rng.Int64N(l.BurstOrRate() + 2)
						if checkWaitsBehind(t, alg, l, st, now.Add(-skew), cost, rng.IntN(4) == 0, true) {
							refused++
						}
						if t.Failed() {
							return
						}
					}
				}
				if refused < 200 {
					t.Errorf("%s: only %d refusals checked", alg, refused)
				}
			})
		}
	})
	t.Run("far", func(t *testing.T) {
		// Far behind a bucket at a high rate: the debt as seen from the
		// request is past the cap (farBehind). Ticks of 1 ms: not exact.
		l := sluice.PerSecond(sluice.MaxRate(time.Second))
		t1 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, alg := range sluice.Algorithms() {
			if alg.ValidateLimit(l) != nil {
				continue
			}
			var st sluice.State
			alg.Take(&st, l, t1, l.Rate)
			alg.Take(&st, l, t1, l.Rate)
			for _, back := range []time.Duration{time.Millisecond, time.Second, 25 * time.Hour} {
				for _, force := range []bool{false, true} {
					checkWaitsBehind(t, alg, l, st, t1.Add(-back), 1, force, false)
				}
			}
			big := st.Clone()
			alg.Charge(&big, l, t1, 1<<62)
			checkWaitsBehind(t, alg, l, big, t1.Add(-25*time.Hour), 1, false, false)
		}
	})
}

// behindState drives a fresh state through a short random trace of takes
// and, now and then, charges past the limit, and returns it with the last
// instant.
func behindState(rng *rand.Rand, alg sluice.Algorithm, l sluice.Limit) (sluice.State, time.Time) {
	var st sluice.State
	now := sluicetest.T0.Add(time.Duration(rng.Int64N(int64(time.Hour))) / time.Microsecond * time.Microsecond)
	for range rng.IntN(30) {
		switch rng.IntN(3) {
		case 1:
			now = now.Add(time.Duration(rng.Int64N(int64(l.Period)/l.Rate*2)/1000) * time.Microsecond)
		case 2:
			now = now.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
		}
		if rng.IntN(8) == 0 {
			alg.Charge(&st, l, now, rng.Int64N(3*l.BurstOrRate()))
		} else {
			alg.Take(&st, l, now, 1+rng.Int64N(2))
		}
	}
	return st, now
}
