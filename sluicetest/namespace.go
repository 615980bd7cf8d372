package sluicetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testNamespaces: one key in two namespaces is two states, with Take and
// with TakeAll; the same namespace and key is one.
func testNamespaces(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	key := uniq(t, "k")
	lim := sluice.PerMinute(3)
	req := func(ns string, alg sluice.Algorithm, l sluice.Limit) sluice.Request {
		return sluice.Request{Namespace: ns, Key: key, Algorithm: alg, Limit: l, Cost: 1, Now: T0}
	}
	for i := range 3 {
		if d, err := s.Take(ctx, req("a|", sluice.FixedWindow, lim)); err != nil || !d.Allowed {
			t.Fatalf("take %d in namespace a: %+v, %v; want allowed", i, d, err)
		}
	}
	if d, err := s.Take(ctx, req("a|", sluice.FixedWindow, lim)); err != nil || d.Allowed {
		t.Fatalf("4th take in namespace a: %+v, %v; want denied", d, err)
	}
	// Another namespace, another algorithm and limit on the same key: a
	// fresh state, which leaves namespace a's alone.
	if d, err := s.Take(ctx, req("b|", sluice.TokenBucket, sluice.PerMinute(100))); err != nil || !d.Allowed || d.Remaining != 99 {
		t.Fatalf("first take in namespace b: %+v, %v; want allowed with 99 remaining", d, err)
	}
	if d, err := s.Take(ctx, req("", sluice.FixedWindow, lim)); err != nil || d.Remaining != 2 {
		t.Fatalf("first take with no namespace: %+v, %v; want 2 remaining", d, err)
	}
	rs := []sluice.Request{req("c|", sluice.FixedWindow, lim), req("d|", sluice.SlidingWindowLog, lim)}
	ds := make([]sluice.Decision, len(rs))
	if err := s.TakeAll(ctx, rs, ds); err != nil || !sluice.AllAllowed(ds) || ds[0].Remaining != 2 || ds[1].Remaining != 2 {
		t.Fatalf("TakeAll in namespaces c and d: %+v, %v; want both allowed, 2 remaining", ds, err)
	}
	if d, err := s.Take(ctx, req("a|", sluice.FixedWindow, lim)); err != nil || d.Allowed || d.Remaining != 0 {
		t.Fatalf("namespace a after the others: %+v, %v; want still denied", d, err)
	}
}

// testReset: a store that implements sluice.Resetter forgets the key of
// one namespace, and only that one, for every algorithm.
func testReset(t *testing.T, s sluice.Store) {
	rs, ok := s.(sluice.Resetter)
	if !ok {
		t.Skip("the store does not implement sluice.Resetter")
	}
	ctx := context.Background()
	key := uniq(t, "k")
	for _, alg := range sluice.Algorithms() {
		lim := sluice.PerHour(1)
		a := sluice.Request{Namespace: "a" + alg.String() + "|", Key: key, Algorithm: alg, Limit: lim, Cost: 1, Now: T0}
		b := a
		b.Namespace = "b" + alg.String() + "|"
		for _, r := range []sluice.Request{a, b} {
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("%v: first take in %q: %+v, %v", alg, r.Namespace, d, err)
			}
		}
		if err := rs.Reset(ctx, a); err != nil {
			t.Fatalf("%v: Reset: %v", alg, err)
		}
		// After the Reset, a decides as a key never seen (fresh, in a
		// namespace of its own); b, whose state is kept, does not.
		a.Now = T0.Add(time.Second)
		fresh := a
		fresh.Namespace = "fresh" + alg.String() + "|"
		want, err := s.Take(ctx, fresh)
		if err != nil || !want.Allowed {
			t.Fatalf("%v: first take in %q: %+v, %v", alg, fresh.Namespace, want, err)
		}
		if d, err := s.Take(ctx, a); err != nil || d != want {
			t.Errorf("%v: take after Reset = %+v, %v; want %+v as for a key never seen", alg, d, err, want)
		}
		b.Now = a.Now
		if d, err := s.Take(ctx, b); err != nil || d == want {
			t.Errorf("%v: take in the other namespace after Reset = %+v, %v; want its state kept (not a new key's %+v)", alg, d, err, want)
		}
		if err := rs.Reset(ctx, sluice.Request{Namespace: "none|", Key: key, Algorithm: alg, Limit: lim}); err != nil && !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Errorf("%v: Reset of a key never seen: %v", alg, err)
		}
	}
}
