package sluice_test

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// nextUnit is, by search over the pure algorithm, how long after now
// until the Remaining of st (the state right after a decision at now)
// grows by one if nothing else arrives; for a full limit, after spending
// one unit at now (the time that unit takes to come back).
func nextUnit(t *testing.T, alg sluice.Algorithm, l sluice.Limit, st sluice.State, now time.Time, full bool) time.Duration {
	t.Helper()
	if full {
		st = st.Clone()
		if _, _, err := alg.Take(&st, l, now, 1); err != nil {
			t.Fatal(err)
		}
	}
	at := func(w time.Duration) int64 {
		c := st.Clone()
		d, _, err := alg.Take(&c, l, now.Add(w), 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	r := at(0)
	hi := 2*l.Period + 2*time.Duration(l.BurstOrRate()+1)*l.Period/time.Duration(l.Rate) + time.Hour
	hi /= time.Microsecond
	n := sort.Search(int(hi), func(i int) bool { return at(time.Duration(i)*time.Microsecond) > r })
	if n == int(hi) {
		t.Fatalf("%s %v: Remaining %d never grows", alg, l, r)
	}
	return time.Duration(n) * time.Microsecond
}

// TestNextAfter steps the pure algorithms through random traces (takes,
// charges past the limit, now and then a request from a clock behind the
// key's) and checks NextAfter against the time the next unit comes back,
// found by search: never shorter, and for the buckets, GCRA and the fixed
// window the same or a tick more (these limits count in ticks of 1 µs)
// whenever the request was on the key's clock; for every algorithm the
// same on a refusal for want of one unit.
func TestNextAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	limits := []sluice.Limit{
		sluice.PerMinute(10), sluice.PerSecond(3), sluice.Every(5, 250*time.Millisecond).WithBurst(2),
		sluice.PerSecond(7).WithBurst(12), sluice.PerMinute(10).WithSegments(4), sluice.Every(3, 7*time.Millisecond),
	}
	big := sluice.PerDay(1_000_000) // in ticks of 10 µs
	exact := map[sluice.Algorithm]bool{sluice.TokenBucket: true, sluice.GCRA: true, sluice.LeakyBucket: true, sluice.FixedWindow: true}
	var checked, exactChecked, fullChecked, refusals int
	for _, alg := range sluice.Algorithms() {
		for _, l := range append(limits, big) {
			if refusesBurst(alg, l) {
				continue // a window takes no burst
			}
			n := 300
			if l == big {
				n = 30 // a search over days
				if alg == sluice.SlidingWindowLog {
					n = 0 // its charges log a million entries
				}
			}
			for range n {
				st, now := behindState(rng, alg, l)
				if rng.IntN(10) == 0 {
					st = sluice.State{} // a new key: full
				}
				behind := time.Duration(0)
				if rng.IntN(4) == 0 {
					behind = time.Duration(rng.Int64N(int64(l.Period)/1000)) * time.Microsecond
				}
				at := now.Add(-behind)
				cost := rng.Int64N(3)
				force := rng.IntN(6) == 0
				probe := st.Clone()
				var d sluice.Decision
				var err error
				if force {
					d, _, err = alg.Charge(&probe, l, at, cost)
				} else {
					d, _, err = alg.Take(&probe, l, at, cost)
				}
				if err != nil {
					t.Fatal(err)
				}
				full := d.ResetAfter == 0
				// The algorithms count in ticks; a request's now, in µs,
				// is rounded to one, so the search below can find a unit
				// back up to a tick less a µs before the tick says.
				tick, slack := time.Microsecond, time.Duration(0)
				if l.Period == 24*time.Hour {
					tick = 10 * time.Microsecond
					slack = tick - time.Microsecond
				}
				want := nextUnit(t, alg, l, probe, at, full)
				got := alg.NextAfter(d, l)
				checked++
				if full {
					fullChecked++
				}
				if !d.Allowed && cost == 0 {
					// A query refused while a charge's debt is past the
					// limit: its RetryAfter, when a query is admitted,
					// bounds t (before the unit comes back).
					if w := min(want, d.RetryAfter); got < w-slack || got > w+slack {
						t.Fatalf("%s %v: after %+v (a query, force %v), NextAfter = %v, want %v", alg, l, d, force, got, min(want, d.RetryAfter))
					}
					continue
				}
				// A full window asked from a clock behind the key's counts
				// a unit spent now in the key's newer window, which the
				// decision does not tell: NextAfter's Period is short by
				// up to how far behind (documented).
				aheadWindow := full && behind > 0 && (alg == sluice.FixedWindow || alg == sluice.SlidingWindowCounter)
				if got < want-slack && !aheadWindow {
					t.Fatalf("%s %v: after %+v (cost %d, force %v, %v behind), NextAfter = %v, but Remaining grows after %v", alg, l, d, cost, force, behind, got, want)
				}
				oneShort := !d.Allowed && !force && cost == 1 && d.Remaining == 0
				if oneShort {
					refusals++
				}
				if (exact[alg] && behind == 0 && !(alg == sluice.FixedWindow && full)) || oneShort {
					exactChecked++
					if got > want+tick {
						t.Fatalf("%s %v: after %+v (cost %d, force %v), NextAfter = %v, want %v (or a tick more)", alg, l, d, cost, force, got, want)
					}
				}
			}
		}
	}
	if exactChecked < checked/3 || fullChecked < 100 || refusals < 200 {
		t.Fatalf("checked %d decisions: %d exactly, %d full, %d refusals for one unit: too few", checked, exactChecked, fullChecked, refusals)
	}
	t.Logf("checked %d decisions: %d exactly, %d full, %d refusals for one unit", checked, exactChecked, fullChecked, refusals)
}

// RemainingAfter, for every algorithm and a counter left as a run of decisions
// and forced charges (debt) left it: what it says a counter that answered
// d would answer dt later, having taken nothing, is never more than the
// counter answers then (what a reader takes as taken between the two never is more than was), and
// for the buckets and the fixed window at most a unit less; the sliding
// windows are modelled from ResetAfter on (full again), not before.
func TestRemainingAfterNeverOverstates(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fullAgain := 0
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, a := range sluice.Algorithms() {
		for range 2000 {
			l := sluice.Limit{Rate: 1 + rng.Int64N(200), Period: time.Duration(1+rng.Int64N(60_000)) * time.Millisecond}
			if rng.IntN(2) == 0 && a.TakesBurst() { // a window takes no burst
				l.Burst = 1 + rng.Int64N(400)
			}
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
			got := a.RemainingAfter(d1, l, dt)
			modelled := a != sluice.SlidingWindowLog && a != sluice.SlidingWindowCounter
			// A sliding window is full again at ResetAfter, and said so.
			full := !modelled && d1.ResetAfter > 0 && dt >= d1.ResetAfter
			if full {
				fullAgain++
			}
			if got > d2.Remaining || (modelled || full) && got < d2.Remaining-1 {
				t.Fatalf("%v %v: answered %+v, then %v later %+v; RemainingAfter says %d", a, l, d1, dt, d2, got)
			}
		}
	}
	if fullAgain < 200 {
		t.Fatalf("a sliding window read past its ResetAfter %d times: too few", fullAgain)
	}
}

// RemainingAt, for every algorithm: a reader that kept a key's state st1
// at t1 and asks its Remaining at t2 takes RemainingAt(st1, t2) less that
// as what was taken between them. That is never more than was admitted
// (or charged) meanwhile, and exactly that when it all came at t2, or,
// for the sliding log, within a period of t2 (its units leave one by one,
// and RemainingAt knows when): the regain a Decision cannot tell.
func TestRemainingAtCountsWhatWasTaken(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	exact := 0
	for _, a := range sluice.Algorithms() {
		for range 2000 {
			l := sluice.Limit{Rate: 1 + rng.Int64N(200), Period: time.Duration(1+rng.Int64N(60_000)) * time.Millisecond}
			if rng.IntN(2) == 0 && a.TakesBurst() {
				l.Burst = 1 + rng.Int64N(400)
			}
			if a == sluice.SlidingWindowCounter && rng.IntN(2) == 0 {
				l.Segments = 1 + rng.IntN(8)
				l.Period = l.Period / time.Millisecond * time.Millisecond * time.Duration(l.Segments) // whole µs per sub-window
			}
			var st sluice.State
			now := t0
			step := func(span time.Duration, force bool) int64 {
				now = now.Add(time.Duration(rng.Int64N(int64(span) + 1)))
				cost := 1 + rng.Int64N(max(1, l.Rate/3))
				var d sluice.Decision
				var err error
				if force {
					d, _, err = a.Charge(&st, l, now, cost)
				} else {
					d, _, err = a.Take(&st, l, now, cost)
				}
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed || force {
					return cost
				}
				return 0
			}
			for range rng.IntN(30) {
				step(l.Period/4, rng.IntN(8) == 0)
			}
			if _, _, err := a.Take(&st, l, now, 0); err != nil { // the first reading
				t.Fatal(err)
			}
			st1 := st.Clone()
			// Between the readings: all at one instant, or spread over
			// less than a period.
			together := rng.IntN(2) == 0
			span := l.Period / 10
			if together {
				now = now.Add(time.Duration(rng.Int64N(int64(2 * l.Period))))
				span = 0
			}
			var took int64
			forced := false
			for range rng.IntN(8) {
				force := !together && rng.IntN(8) == 0
				forced = forced || force
				took += step(span, force)
			}
			d2, _, err := a.Take(&st, l, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := a.RemainingAt(st1, l, now) - d2.Remaining
			if got < 0 || got > took {
				t.Fatalf("%v %v: took %d between the readings, RemainingAt says %d (%d less %d)", a, l, took, got, a.RemainingAt(st1, l, now), d2.Remaining)
			}
			if together || a == sluice.SlidingWindowLog && !forced {
				exact++
				if got != took {
					t.Fatalf("%v %v: took %d between the readings (together %v), RemainingAt says %d", a, l, took, together, got)
				}
			}
		}
	}
	if exact < 3000 {
		t.Fatalf("checked %d exactly: too few", exact)
	}
}
