package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testRefunder checks a store's sluice.Refunder, when it has one: a
// random trace of takes and refunds decides as Reference, and the checks
// RunRefunder runs. A store without it, or one whose Refund answers
// errors.ErrUnsupported (a decorator over a store without it), is skipped.
func testRefunder(t *testing.T, open func(t *testing.T) sluice.Store) {
	if err := refunder(t, open(t)); err != nil {
		t.Skip(err)
	}
	t.Run("Differential", func(t *testing.T) { testRefundDifferential(t, open(t)) })
	runRefunder(t, open)
}

// RunRefunder checks a store's sluice.Refunder as Run does, less the
// random trace, and fails where Run skips: when the store does not
// implement it, or its Refund answers errors.ErrUnsupported. A refund
// right after a take of the same cost undoes it; a key refused at its
// limit admits again what was given back (for a decorator that remembers
// refusals, the over-limit cache, that it forgets the key's); a refund
// on a key at rest changes nothing; invalid refunds are errors of their
// own kind, never ErrStoreUnavailable.
func RunRefunder(t *testing.T, open func(t *testing.T) sluice.Store) {
	if err := refunder(t, open(t)); err != nil {
		t.Fatal(err)
	}
	runRefunder(t, open)
}

func runRefunder(t *testing.T, open func(t *testing.T) sluice.Store) {
	t.Run("Undoes", func(t *testing.T) { testRefundUndoes(t, open(t)) })
	t.Run("AdmitsAgain", func(t *testing.T) { testRefundAdmitsAgain(t, open(t)) })
	t.Run("AtRest", func(t *testing.T) { testRefundAtRest(t, open(t)) })
	t.Run("Errors", func(t *testing.T) { testRefundErrors(t, open(t)) })
}

// refunder says why s cannot give units back: it lacks sluice.Refunder,
// or its Refund answers errors.ErrUnsupported; nil when it can.
func refunder(t *testing.T, s sluice.Store) error {
	rf, ok := s.(sluice.Refunder)
	if !ok {
		return fmt.Errorf("%T does not implement sluice.Refunder", s)
	}
	r := sluice.Request{Namespace: "refund|", Key: uniq(t, "probe"), Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(10), Cost: 1, Now: T0}
	if _, err := rf.Refund(context.Background(), r); errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("%T cannot give units back: %w", s, err)
	}
	return nil
}

// testRefundDifferential replays random traces of takes and refunds
// through s and Reference and requires identical decisions.
func testRefundDifferential(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	rf := s.(sluice.Refunder)
	sd := seed(t)
	for _, alg := range sluice.Algorithms() {
		for li, l := range DifferentialLimits() {
			if skipLimit(alg, l) {
				continue
			}
			rng := rand.New(rand.NewPCG(sd, uint64(li)*16+uint64(alg)+7))
			ref := NewReference()
			prefix := uniq(t, fmt.Sprintf("%s/%d/", alg, li))
			for i, st := range randomTrace(rng, 300, 3, l) {
				r := sluice.Request{Key: fmt.Sprintf("%s%d", prefix, st.key), Algorithm: alg, Limit: l, Cost: st.cost, Now: T0.Add(st.at), Force: st.force}
				call, do, want := "Take", s.Take, ref.Take
				if rng.IntN(4) == 0 {
					call, do, want = "Refund", rf.Refund, ref.Refund
					r.Cost = rng.Int64N(min(max(l.Rate, l.BurstOrRate()), 50) + 2)
				}
				w, err := want(ctx, r)
				if err != nil {
					t.Fatalf("reference: %v", err)
				}
				got, err := do(ctx, r)
				if err != nil {
					t.Fatalf("%s %v step %d: %s: %v", alg, l, i, call, err)
				}
				if got != w {
					t.Fatalf("%s %v step %d (seed %d): %s(key %d, t0+%v, cost %d, force %v) = %+v, want %+v", alg, l, i, sd, call, st.key, st.at, r.Cost, r.Force, got, w)
				}
			}
		}
	}
}

// testRefundUndoes: a take of cost 3 and a refund of 3 at the same
// instant leave the key as it was: its next decisions are a fresh key's.
func testRefundUndoes(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	rf := s.(sluice.Refunder)
	for _, alg := range sluice.Algorithms() {
		l := sluice.PerSecond(4).WithBurst(5)
		if isWindow(alg) {
			l.Burst = 0 // a window takes no burst
		}
		r := sluice.Request{Namespace: "refund|", Key: uniq(t, alg.String()), Algorithm: alg, Limit: l, Cost: 1, Now: T0}
		fresh := r
		fresh.Key = uniq(t, alg.String()+"/fresh")
		take := func(q sluice.Request, cost int64, at time.Duration) sluice.Decision {
			t.Helper()
			q.Cost, q.Now = cost, T0.Add(at)
			d, err := s.Take(ctx, q)
			if err != nil {
				t.Fatalf("%v: Take(%q, cost %d, t0+%v): %v", alg, q.Key, cost, at, err)
			}
			return d
		}
		take(r, 1, 0)
		take(fresh, 1, 0)
		if d := take(r, 3, 0); !d.Allowed {
			t.Fatalf("%v: Take(cost 3) = %+v, want admitted", alg, d)
		}
		q := r
		q.Cost = 3
		d, err := rf.Refund(ctx, q)
		if err != nil {
			t.Fatalf("%v: Refund(3): %v", alg, err)
		}
		if want := take(fresh, 0, 0); d != want {
			t.Errorf("%v: take 1, take 3, Refund(3) = %+v; want %+v, a take of cost 0 after a take of 1", alg, d, want)
		}
		for _, at := range []time.Duration{0, 0, 0, 0, 0, 100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond} {
			if got, want := take(r, 1, at), take(fresh, 1, at); got != want {
				t.Fatalf("%v: after take 1, take 3, Refund(3): Take(1) at t0+%v = %+v; want %+v as after take 1", alg, at, got, want)
			}
		}
	}
}

// testRefundAdmitsAgain: a key refused at its limit admits a request of
// cost 2 right after a refund of 2, and refuses it again after a refund
// of 1 only (for the leaky bucket, it is admitted with a Delay no longer
// than the queue's).
func testRefundAdmitsAgain(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	rf := s.(sluice.Refunder)
	for _, alg := range sluice.Algorithms() {
		l := sluice.PerMinute(4)
		r := sluice.Request{Namespace: "refund|", Key: uniq(t, alg.String()), Algorithm: alg, Limit: l, Cost: 1, Now: T0}
		for i := 0; ; i++ {
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatalf("%v: take #%d: %v", alg, i, err)
			}
			if !d.Allowed {
				break
			}
			if i > 10 {
				t.Fatalf("%v: take #%d = %+v, still admitted", alg, i, d)
			}
		}
		refund := func(cost int64) {
			t.Helper()
			q := r
			q.Cost = cost
			if _, err := rf.Refund(ctx, q); err != nil {
				t.Fatalf("%v: Refund(%d): %v", alg, cost, err)
			}
		}
		take := func(cost int64, want bool, after string) {
			t.Helper()
			q := r
			q.Cost = cost
			d, err := s.Take(ctx, q)
			if err != nil || d.Allowed != want {
				t.Fatalf("%v: refused at the limit, %s, Take(%d) = %+v, %v; want Allowed %v", alg, after, cost, d, err, want)
			}
		}
		refund(1)
		take(2, false, "Refund(1)")
		refund(1)
		take(2, true, "Refund(1) twice")
		take(1, false, "Refund(1) twice, Take(2)")
		refund(2)
		take(2, true, "then Refund(2)")
	}
}

// testRefundAtRest: a refund on a key never seen changes nothing: the key
// then decides as a fresh one.
func testRefundAtRest(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	rf := s.(sluice.Refunder)
	for _, alg := range sluice.Algorithms() {
		l := sluice.PerSecond(3)
		r := sluice.Request{Namespace: "refund|", Key: uniq(t, alg.String()), Algorithm: alg, Limit: l, Cost: 5, Now: T0}
		if _, err := rf.Refund(ctx, r); err != nil {
			t.Fatalf("%v: Refund on a new key: %v", alg, err)
		}
		fresh := r
		fresh.Key = uniq(t, alg.String()+"/fresh")
		r.Cost, fresh.Cost = 1, 1
		for i := range 6 {
			got, err1 := s.Take(ctx, r)
			want, err2 := s.Take(ctx, fresh)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if got != want {
				t.Fatalf("%v: take #%d after a refund on a new key = %+v; want %+v as a fresh key's", alg, i, got, want)
			}
		}
	}
}

// testRefundErrors: an invalid refund is an error of its own kind, never
// one wrapping sluice.ErrStoreUnavailable.
func testRefundErrors(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	rf := s.(sluice.Refunder)
	good := sluice.Request{Namespace: "refund|", Key: uniq(t, "k"), Algorithm: sluice.GCRA, Limit: sluice.PerSecond(2), Cost: 1, Now: T0}
	for _, tc := range []struct {
		what   string
		change func(r *sluice.Request)
		want   error
	}{
		{"cost -1", func(r *sluice.Request) { r.Cost = -1 }, sluice.ErrInvalidCost},
		{"rate 0", func(r *sluice.Request) { r.Limit.Rate = 0 }, sluice.ErrInvalidLimit},
		{"algorithm 0", func(r *sluice.Request) { r.Algorithm = 0 }, sluice.ErrUnknownAlgorithm},
		{"the zero Now", func(r *sluice.Request) { r.Now = time.Time{} }, sluice.ErrInvalidTime},
	} {
		r := good
		tc.change(&r)
		_, err := rf.Refund(ctx, r)
		switch {
		case err == nil:
			t.Errorf("Refund with %s: no error, want one wrapping %v", tc.what, tc.want)
		case errors.Is(err, sluice.ErrStoreUnavailable):
			t.Errorf("Refund with %s = %v: an invalid request wraps ErrStoreUnavailable", tc.what, err)
		case !errors.Is(err, tc.want):
			t.Errorf("Refund with %s = %v, want an error wrapping %v", tc.what, err, tc.want)
		}
	}
}
