package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testWithinTaker checks a store's sluice.WithinTaker, when it has one:
// the decision tests run again with every other request through
// TakeWithin, whose bound then never applies (a leaky bucket's bound
// longer than any queue; 0 for the other algorithms, which it must not
// touch), so it must decide as Take; and a leaky bucket request whose slot
// leaves past the bound is refused as late, counting nothing. A store
// without it, or one whose TakeWithin answers errors.ErrUnsupported (a
// decorator over a store without it), is skipped.
func testWithinTaker(t *testing.T, open func(t *testing.T) sluice.Store) {
	if err := withinTaker(t, open(t)); err != nil {
		t.Skip(err)
	}
	via := func(t *testing.T) sluice.Store { return viaWithinOf(t, open(t)) }
	t.Run("Tables", func(t *testing.T) {
		for _, tb := range Tables() {
			t.Run(tb.Name, func(t *testing.T) { RunTable(t, via(t), tb) })
		}
	})
	t.Run("Differential", func(t *testing.T) { testDifferential(t, via(t)) })
	t.Run("ReportCarriesDebt", func(t *testing.T) { testReport(t, via(t)) })
	t.Run("Late", func(t *testing.T) { testWithinLate(t, open(t)) })
}

// RunWithinTaker checks a store's sluice.WithinTaker as Run does, less
// the random trace, and fails where Run skips: when the store does not
// implement it, or its TakeWithin answers errors.ErrUnsupported. The step
// tables run with every other request through TakeWithin under a bound
// that never applies, and a leaky bucket request whose slot leaves past
// the bound must be refused as late, counting nothing. For a decorator
// that must keep the promise over the store it wraps, the over-limit
// cache among them, whose figures match the store's exactly on the tables
// but not on a random trace (a refusal it remembers bounds those of
// larger costs).
func RunWithinTaker(t *testing.T, open func(t *testing.T) sluice.Store) {
	if err := withinTaker(t, open(t)); err != nil {
		t.Fatal(err)
	}
	t.Run("Tables", func(t *testing.T) {
		for _, tb := range Tables() {
			t.Run(tb.Name, func(t *testing.T) { RunTable(t, viaWithinOf(t, open(t)), tb) })
		}
	})
	t.Run("Late", func(t *testing.T) { testWithinLate(t, open(t)) })
}

// withinTaker says why s cannot take within a bound: it lacks
// sluice.WithinTaker, or its TakeWithin of a leaky bucket request answers
// errors.ErrUnsupported; nil when it can.
func withinTaker(t *testing.T, s sluice.Store) error {
	wt, ok := s.(sluice.WithinTaker)
	if !ok {
		return fmt.Errorf("%T does not implement sluice.WithinTaker", s)
	}
	r := sluice.Request{Namespace: "within|", Key: uniq(t, "probe"), Algorithm: sluice.LeakyBucket, Limit: sluice.PerSecond(10), Cost: 1, Now: T0}
	if _, _, err := wt.TakeWithin(context.Background(), r, time.Second); errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("%T cannot take within a bound: %w", s, err)
	}
	return nil
}

// viaWithinOf returns s with every other Take through its TakeWithin.
func viaWithinOf(t *testing.T, s sluice.Store) sluice.Store {
	return &viaWithin{Store: s, wt: s.(sluice.WithinTaker), t: t}
}

// viaWithin is a Store whose Take alternates between the store's Take and
// its TakeWithin under a bound that never applies.
type viaWithin struct {
	sluice.Store
	wt sluice.WithinTaker
	t  *testing.T
	n  atomic.Uint64
}

func (v *viaWithin) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if v.n.Add(1)%2 == 0 {
		return v.Store.Take(ctx, r)
	}
	within := time.Duration(0)
	if r.Algorithm == sluice.LeakyBucket {
		within = math.MaxInt64
	}
	d, late, err := v.wt.TakeWithin(ctx, r, within)
	if late {
		v.t.Errorf("TakeWithin(%+v, %v) = %+v, late; want as Take, not late", r, within, d)
	}
	return d, err
}

// testWithinLate: a leaky bucket request whose slot leaves past the bound
// is refused, RetryAfter its Delay, and counts nothing; one that leaves
// within it is admitted and counted, as by Take.
func testWithinLate(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	wt := s.(sluice.WithinTaker)
	ms := time.Millisecond
	r := sluice.Request{Namespace: "within|", Key: uniq(t, "k"), Algorithm: sluice.LeakyBucket, Limit: sluice.PerSecond(10).WithBurst(20), Cost: 1, Now: T0}
	twin := r
	twin.Key = uniq(t, "twin")
	for _, q := range []sluice.Request{r, twin} {
		for i := range 3 { // slots leaving at 0, 100ms and 200ms
			if d, err := s.Take(ctx, q); err != nil || !d.Allowed || d.Delay != time.Duration(i)*100*ms {
				t.Fatalf("take #%d of %q = %+v, %v; want admitted with Delay %v", i, q.Key, d, err, time.Duration(i)*100*ms)
			}
		}
	}
	ask := func(q sluice.Request) sluice.Decision {
		q.Cost = 0
		d, err := s.Take(ctx, q)
		if err != nil {
			t.Fatalf("take %q at cost 0: %v", q.Key, err)
		}
		return d
	}
	for _, tc := range []struct {
		cost   int64
		within time.Duration
		delay  time.Duration // the slot's Delay, its last unit's
		late   bool
	}{
		{1, 250 * ms, 300 * ms, true},
		{1, 300*ms - 1, 300 * ms, true},
		{2, 350 * ms, 400 * ms, true},
		{2, 400 * ms, 400 * ms, false},
	} {
		q := r
		q.Cost = tc.cost
		before := ask(q)
		d, late, err := wt.TakeWithin(ctx, q, tc.within)
		if err != nil {
			t.Fatalf("TakeWithin(cost %d, %v): %v", tc.cost, tc.within, err)
		}
		if !tc.late {
			tw := twin
			tw.Cost = tc.cost
			want, err := s.Take(ctx, tw)
			if late || err != nil || d != want || d.Delay != tc.delay {
				t.Errorf("TakeWithin(cost %d, %v) = %+v, late %v; want %+v as Take (Delay %v), not late", tc.cost, tc.within, d, late, want, tc.delay)
			}
			// The same state written: the two keys decide alike from
			// here on.
			for _, at := range []time.Duration{0, 150 * ms, 450 * ms, time.Second} {
				q.Now, tw.Now = T0.Add(at), T0.Add(at)
				if got, want := ask(q), ask(tw); got != want {
					t.Errorf("at %v after TakeWithin(cost %d, %v), a take at cost 0 = %+v; want %+v as after Take", at, tc.cost, tc.within, got, want)
				}
			}
			continue
		}
		want := before
		want.Allowed, want.RetryAfter, want.Delay = false, tc.delay, 0
		if !late || d != want {
			t.Errorf("TakeWithin(cost %d, %v) = %+v, late %v; want %+v, late", tc.cost, tc.within, d, late, want)
		}
		if after := ask(q); after != before {
			t.Errorf("after a late TakeWithin(cost %d, %v), a take at cost 0 = %+v; want %+v (nothing counted)", tc.cost, tc.within, after, before)
		}
	}
}
