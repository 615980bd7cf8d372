package sluice_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

var refundLimits = []sluice.Limit{
	sluice.PerSecond(3),
	sluice.Every(5, 700*time.Millisecond).WithBurst(2),
	sluice.Every(4, time.Second).WithBurst(9),
	sluice.PerMinute(12).WithSegments(3),
	sluice.PerMinute(10),
	sluice.PerDay(1_000_000),
}

// TestRefundPerAlgorithm gives back units after three requests of cost 1
// at t0, and checks what each algorithm then admits at t0: what it gave
// back, no more.
func TestRefundPerAlgorithm(t *testing.T) {
	l := sluice.PerMinute(5) // the leaky bucket: Burst 5, 12s apart
	t0 := sluicetest.T0
	for _, tc := range []struct {
		refund int64
		admits int64 // requests of cost 1 admitted at t0 after the refund
	}{
		{0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 5}, {1 << 62, 5},
	} {
		for _, alg := range sluice.Algorithms() {
			var st sluice.State
			for i := range 3 {
				if d, _, err := alg.Take(&st, l, t0, 1); err != nil || !d.Allowed {
					t.Fatalf("%v: take #%d = %+v, %v; want admitted", alg, i, d, err)
				}
			}
			d, _, err := alg.Refund(&st, l, t0, tc.refund)
			if err != nil {
				t.Fatalf("%v: Refund(%d): %v", alg, tc.refund, err)
			}
			after := st.Clone()
			ask, _, _ := alg.Take(&after, l, t0, 0)
			if d != ask {
				t.Errorf("%v: Refund(%d) = %+v; want %+v, a take of cost 0 right after", alg, tc.refund, d, ask)
			}
			admits := tc.admits
			if alg == sluice.LeakyBucket {
				admits++ // Burst+1 at an instant
			}
			var n int64
			for n < 10 {
				d, _, _ := alg.Take(&st, l, t0, 1)
				if !d.Allowed || d.Delay > 0 && alg != sluice.LeakyBucket {
					break
				}
				n++
			}
			if n != admits {
				t.Errorf("%v: after 3 takes and Refund(%d), %d more admitted at t0; want %d", alg, tc.refund, n, admits)
			}
		}
	}
}

// TestRefundUndoesTake takes a request and refunds it at once at random
// points of random traces; every later decision must equal that of a
// state that never saw the request. Refunds on keys at rest change
// nothing, and a refund's Remaining grows by at most its cost.
func TestRefundUndoesTake(t *testing.T) {
	rng := rand.New(rand.NewPCG(sluicetest.Seed(t), 11))
	for _, alg := range sluice.Algorithms() {
		for _, l := range refundLimits {
			if l.Segments > 1 && alg != sluice.SlidingWindowCounter || refusesBurst(alg, l) {
				continue // segments are the counter's, a burst the buckets'
			}
			var st, ref sluice.State
			now := sluicetest.T0
			undone := 0
			for i := range 2000 {
				switch rng.IntN(4) {
				case 0:
				case 1:
					now = now.Add(time.Duration(rng.Int64N(5000)+1) * time.Microsecond)
				default:
					now = now.Add(time.Duration(rng.Int64N(int64(l.Period)/l.Rate*2/1000)+1) * time.Microsecond)
				}
				cost := rng.Int64N(min(l.BurstOrRate(), 20) + 1)
				if rng.IntN(3) == 0 {
					before := st.Clone()
					ask, _, _ := alg.Take(&before, l, now, 0)
					d, _, err := alg.Take(&st, l, now, cost)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						back, _, err := alg.Refund(&st, l, now, cost)
						if err != nil {
							t.Fatal(err)
						}
						if back.Remaining != ask.Remaining || back.ResetAfter != ask.ResetAfter {
							t.Fatalf("%v %v step %d: take %d then Refund(%d) = %+v; want Remaining and ResetAfter as before the take, %+v", alg, l, i, cost, cost, back, ask)
						}
						undone++
						continue
					}
				}
				if rng.IntN(8) == 0 { // a refund on both: never more than counted
					a, _, err1 := alg.Refund(&st, l, now, cost)
					refBefore := ref.Clone()
					ask, _, _ := alg.Take(&refBefore, l, now, 0)
					b, _, err2 := alg.Refund(&ref, l, now, cost)
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					if a != b {
						t.Fatalf("%v %v step %d: Refund(%d) = %+v; the state that never saw the undone requests: %+v", alg, l, i, cost, a, b)
					}
					if b.Remaining > ask.Remaining+cost {
						t.Fatalf("%v %v step %d: Refund(%d) left Remaining %d, from %d: more than given back", alg, l, i, cost, b.Remaining, ask.Remaining)
					}
					continue
				}
				got, _, err1 := alg.Take(&st, l, now, cost)
				want, _, err2 := alg.Take(&ref, l, now, cost)
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if got != want {
					t.Fatalf("%v %v step %d: Take(%d) = %+v after %d undone requests; want %+v", alg, l, i, cost, got, undone, want)
				}
			}
			if undone < 50 {
				t.Errorf("%v %v: only %d requests undone", alg, l, undone)
			}
		}
	}
}

// TestRefundAtRestChangesNothing: a refund on a key never seen, or at
// rest, leaves a state that decides as the zero State.
func TestRefundAtRestChangesNothing(t *testing.T) {
	for _, alg := range sluice.Algorithms() {
		for _, l := range refundLimits {
			if l.Segments > 1 && alg != sluice.SlidingWindowCounter || refusesBurst(alg, l) {
				continue // segments are the counter's, a burst the buckets'
			}
			var st sluice.State
			at := sluicetest.T0.Add(3 * time.Second)
			if _, _, err := alg.Refund(&st, l, at, 5); err != nil {
				t.Fatal(err)
			}
			var fresh sluice.State
			for i := range int(min(l.BurstOrRate(), 20)) + 3 {
				got, _, _ := alg.Take(&st, l, at, 1)
				want, _, _ := alg.Take(&fresh, l, at, 1)
				if got != want {
					t.Fatalf("%v %v: take #%d after a refund on a new key = %+v; want %+v", alg, l, i, got, want)
				}
			}
			// At rest again, much later: a refund gives nothing back.
			later := at.Add(3 * l.Period * time.Duration(max(1, l.BurstOrRate()/l.Rate+1)))
			if _, _, err := alg.Refund(&st, l, later, 1<<40); err != nil {
				t.Fatal(err)
			}
			fresh = sluice.State{}
			for i := range int(min(l.BurstOrRate(), 20)) + 3 {
				got, _, _ := alg.Take(&st, l, later, 1)
				want, _, _ := alg.Take(&fresh, l, later, 1)
				if got != want {
					t.Fatalf("%v %v: take #%d after a refund at rest = %+v; want %+v", alg, l, i, got, want)
				}
			}
		}
	}
}

// TestRefundDebt: a forced charge's debt is given back as any count. A
// charge of 6 past a limit of 4, less 2, is a charge of 4, except where
// the charge is kept otherwise: the leaky bucket queues a charge past its
// queue a spacing later (as a take of 5), and the log keeps Rate+1 times
// of it (5, less 2, is 3).
func TestRefundDebt(t *testing.T) {
	l := sluice.PerSecond(4)
	for _, alg := range sluice.Algorithms() {
		var st, want sluice.State
		t0 := sluicetest.T0
		if _, _, err := alg.Charge(&st, l, t0, 6); err != nil {
			t.Fatal(err)
		}
		cost := int64(4)
		switch alg {
		case sluice.LeakyBucket:
			cost = 5
		case sluice.SlidingWindowLog:
			cost = 3
		}
		if _, _, err := alg.Charge(&want, l, t0, cost); err != nil {
			t.Fatal(err)
		}
		if _, _, err := alg.Refund(&st, l, t0, 2); err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Duration{0, 100 * time.Millisecond, 600 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
			got, _, _ := alg.Take(&st, l, t0.Add(at), 0)
			w, _, _ := alg.Take(&want, l, t0.Add(at), 0)
			if got != w {
				t.Errorf("%v: charge 6, refund 2: at t0+%v a take of cost 0 = %+v; want %+v as after a charge of %d", alg, at, got, w, cost)
			}
		}
	}
}

// TestRefundFarBehind: a refund from far behind a bucket's arrival time
// (a clock years behind) gives back no more than asked and does not
// overflow.
func TestRefundFarBehind(t *testing.T) {
	l := sluice.PerDay(1_000_000).WithBurst(2_000_000)
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.LeakyBucket} {
		var st sluice.State
		late := sluicetest.T0.Add(50 * 365 * 24 * time.Hour)
		if _, _, err := alg.Charge(&st, l, late, 1<<62); err != nil {
			t.Fatal(err)
		}
		before := st
		if _, _, err := alg.Refund(&st, l, sluicetest.T0, 1); err != nil {
			t.Fatal(err)
		}
		lt, _ := l.Ticks()
		moved := (before.T-st.T)*lt.Rate + before.N - st.N // in parts of 1/Rate tick
		if moved < 0 || moved > lt.Period {
			t.Errorf("%v: a refund of 1 from far behind moved T back by %d parts (from %+v to %+v); want at most one spacing, %d", alg, moved, before, st, lt.Period)
		}
	}
}

func TestRefundErrors(t *testing.T) {
	var st sluice.State
	if _, _, err := sluice.TokenBucket.Refund(&st, sluice.PerSecond(1), sluicetest.T0, -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("Refund(-1): error %v, want ErrInvalidCost", err)
	}
	if _, _, err := sluice.TokenBucket.Refund(&st, sluice.PerSecond(1), time.Time{}, 1); !errors.Is(err, sluice.ErrInvalidTime) {
		t.Errorf("Refund at the zero time: error %v, want ErrInvalidTime", err)
	}
	if _, _, err := sluice.TokenBucket.Refund(&st, sluice.Limit{}, sluicetest.T0, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("Refund under the zero Limit: error %v, want ErrInvalidLimit", err)
	}
}

// A request admitted and then not served gives its units back.
func ExampleAlgorithm_Refund() {
	var st sluice.State
	l := sluice.PerMinute(3)
	now := sluicetest.T0
	for range 3 {
		sluice.FixedWindow.Take(&st, l, now, 1)
	}
	d, _, _ := sluice.FixedWindow.Take(&st, l, now, 1)
	fmt.Println("fourth:", d.Allowed)
	d, _, _ = sluice.FixedWindow.Refund(&st, l, now, 1) // one of the three was dropped
	fmt.Println("after a refund of 1, remaining:", d.Remaining)
	d, _, _ = sluice.FixedWindow.Refund(&st, l, now, 10) // never more than counted
	fmt.Println("after a refund of 10, remaining:", d.Remaining)
	// Output:
	// fourth: false
	// after a refund of 1, remaining: 1
	// after a refund of 10, remaining: 3
}
