package sluice_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSpecWorkedExample is the worked example on a state built by hand: rate
// 10 per minute, 9 requests in the previous minute, 5 so far in this one.
func TestSpecWorkedExample(t *testing.T) {
	minute := sluicetest.T0.Unix() / 60 // the current minute's number
	l := sluice.PerMinute(10)
	for _, tt := range []struct {
		into  time.Duration
		allow bool
	}{
		{15 * time.Second, false}, // floor(9 × 0.75) + 5 + 1 = 12 > 10
		{30 * time.Second, true},  // floor(4.5) + 5 + 1 = 10
	} {
		st := sluice.State{T: minute, N: 5, M: 9} // ticks are µs; T counts sub-windows
		d, _, err := sluice.SlidingWindowCounter.Take(&st, l, sluicetest.T0.Add(tt.into), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tt.allow {
			t.Errorf("at %v into the minute: Allowed = %v, want %v (%+v)", tt.into, d.Allowed, tt.allow, d)
		}
	}
}

// randomState drives a fresh state through a short random trace and
// returns it with the last instant.
func randomState(rng *rand.Rand, alg sluice.Algorithm, l sluice.Limit) (sluice.State, time.Time) {
	var st sluice.State
	now := sluicetest.T0
	for range rng.IntN(30) {
		switch rng.IntN(3) {
		case 1:
			now = now.Add(time.Duration(rng.Int64N(int64(l.Period)/l.Rate*2)/1000) * time.Microsecond)
		case 2:
			now = now.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
		}
		alg.Take(&st, l, now, 1+rng.Int64N(2))
	}
	return st, now
}

// TestRetryAfterMeansRetryAfter: a denied request is admitted exactly
// RetryAfter later if nothing else arrives, and not a microsecond sooner.
// TestResetAfterMeansFull: after ResetAfter the limit has its full
// capacity again.
func TestRetryAfterAndResetAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	limits := []sluice.Limit{sluice.PerMinute(10), sluice.PerSecond(3), sluice.Every(5, 250*time.Millisecond).WithBurst(2), sluice.PerSecond(7).WithBurst(12), sluice.PerMinute(10).WithSegments(4)}
	checked := 0
	for _, alg := range sluice.Algorithms() {
		for _, l := range limits {
			if refusesBurst(alg, l) {
				continue // a window takes no burst
			}
			for range 200 {
				st, now := randomState(rng, alg, l)
				cost := 1 + rng.Int64N(3)
				probe := st.Clone()
				d, _, err := alg.Take(&probe, l, now, cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed || d.RetryAfter == sluice.Never {
					continue
				}
				checked++
				at := func(off time.Duration) sluice.Decision {
					c := st.Clone()
					d, _, _ := alg.Take(&c, l, now.Add(off), cost)
					return d
				}
				if got := at(d.RetryAfter); !got.Allowed {
					t.Fatalf("%s %v cost %d: denied with RetryAfter %v, but still denied then: %+v", alg, l, cost, d.RetryAfter, got)
				}
				if d.RetryAfter >= time.Microsecond {
					if got := at(d.RetryAfter - time.Microsecond); got.Allowed {
						t.Fatalf("%s %v cost %d: RetryAfter %v, but admitted 1 µs sooner", alg, l, cost, d.RetryAfter)
					}
				}
				c := st.Clone()
				q, _, _ := alg.Take(&c, l, now, 0)
				full := st.Clone()
				f, _, _ := alg.Take(&full, l, now.Add(q.ResetAfter), 0)
				fresh := sluice.State{}
				want, _, _ := alg.Take(&fresh, l, now.Add(q.ResetAfter), 0)
				if f.Remaining != want.Remaining {
					t.Fatalf("%s %v: ResetAfter %v, but then Remaining is %d, want %d as for a new key", alg, l, q.ResetAfter, f.Remaining, want.Remaining)
				}
			}
		}
	}
	if checked < 500 {
		t.Fatalf("only %d denials checked", checked)
	}
}

// TestLeakyBucketLeavesEvenlySpaced: whatever the arrivals, admitted
// requests leave (arrival + Delay) at least Period/Rate apart, in order.
func TestLeakyBucketLeavesEvenlySpaced(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	l := sluice.PerSecond(4).WithBurst(3) // 250 ms spacing
	var st sluice.State
	now := sluicetest.T0
	var lastLeave time.Time
	admitted := 0
	for range 5000 {
		now = now.Add(time.Duration(rng.IntN(300_000)) * time.Microsecond)
		d, _, err := sluice.LeakyBucket.Take(&st, l, now, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			continue
		}
		if d.Delay > 3*250*time.Millisecond {
			t.Fatalf("delay %v over burst × spacing", d.Delay)
		}
		leave := now.Add(d.Delay)
		if admitted > 0 && leave.Sub(lastLeave) < 250*time.Millisecond {
			t.Fatalf("admitted request %d leaves %v after the previous one, want ≥ 250ms", admitted, leave.Sub(lastLeave))
		}
		lastLeave = leave
		admitted++
	}
	if admitted < 1000 {
		t.Fatalf("only %d admitted", admitted)
	}
}

// TestRestIsExact: from the instant Take reports as rest, the state decides
// every request exactly as a new key does.
func TestRestIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, alg := range sluice.Algorithms() {
		for _, l := range []sluice.Limit{sluice.PerSecond(3), sluice.PerMinute(10).WithBurst(4), sluice.PerMinute(10).WithSegments(3)} {
			if refusesBurst(alg, l) {
				continue // a window takes no burst
			}
			for range 300 {
				st, now := randomState(rng, alg, l)
				c := st.Clone()
				_, idle, _ := alg.Take(&c, l, now, 0)
				for _, cost := range []int64{0, 1, 2, l.BurstOrRate(), l.BurstOrRate() + 1, l.BurstOrRate() + 2} {
					a, b := st.Clone(), sluice.State{}
					da, _, _ := alg.Take(&a, l, idle, cost)
					db, _, _ := alg.Take(&b, l, idle, cost)
					if da != db {
						t.Fatalf("%s %v cost %d at rest %v: %+v, but a new key gets %+v", alg, l, cost, idle.Sub(now), da, db)
					}
				}
			}
		}
	}
}

func ExampleAlgorithm_Take() {
	var st sluice.State      // the zero State: a key never seen
	l := sluice.PerSecond(2) // burst defaults to the rate
	t0 := time.Unix(1_700_000_000, 0)
	for i, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond} {
		d, _, _ := sluice.LeakyBucket.Take(&st, l, t0.Add(at), 1)
		fmt.Printf("request %d at +%v: allowed=%v delay=%v retry=%v\n", i, at, d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// request 0 at +0s: allowed=true delay=0s retry=0s
	// request 1 at +0s: allowed=true delay=500ms retry=0s
	// request 2 at +0s: allowed=true delay=1s retry=0s
	// request 3 at +500ms: allowed=true delay=1s retry=0s
}

// TestBucketsWithClocksApart: a request older than the key's last one
// (clocks a little apart) refills nothing under the token bucket, which
// counts it against the tokens as they are, while GCRA, which keeps no
// time of the last request, counts it at its own time: it sees the debt the
// bucket had then, and may refuse what the token bucket admits. In time
// order the two decide the same (the sluicetest suite checks it).
func TestBucketsWithClocksApart(t *testing.T) {
	l := sluice.PerSecond(10)
	var tb, g sluice.State
	at := func(d time.Duration) time.Time { return sluicetest.T0.Add(d) }
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		st := &tb
		if alg == sluice.GCRA {
			st = &g
		}
		if d, _, _ := alg.Take(st, l, at(time.Second), 5); !d.Allowed {
			t.Fatalf("%s: 5 of a full bucket of 10 at t0+1s: denied", alg)
		}
	}
	// 100ms behind: the token bucket has 5 tokens; GCRA counts the 5
	// taken at 1s as taken 100ms later, one more token of debt.
	dtb, _, _ := sluice.TokenBucket.Take(&tb, l, at(900*time.Millisecond), 5)
	dg, _, _ := sluice.GCRA.Take(&g, l, at(900*time.Millisecond), 5)
	if !dtb.Allowed || dg.Allowed || dg.RetryAfter != 100*time.Millisecond {
		t.Errorf("5 more at t0+900ms: token_bucket %+v, gcra %+v; want the token bucket to admit, GCRA to refuse for 100ms", dtb, dg)
	}
}
