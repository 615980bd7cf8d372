package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestRefunderConformance: every decorator, alone and stacked as the
// daemon stacks them, over one Redis (and the Fallback in local mode),
// gives units back as sluice.Refunder promises: a refund right after a
// take undoes it, a key refused at its limit admits again what was given
// back (the over-limit cache forgets its refusal), and a refund on a key
// at rest changes nothing.
func TestRefunderConformance(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	leBuckets := newLease(t, rs, fleet.LeaseOptions{})
	for _, st := range decoratorStacks(t, rs) {
		t.Run(st.name, func(t *testing.T) {
			sluicetest.RunRefunder(t, func(*testing.T) sluice.Store { return st.s })
		})
	}
	// A lease of a bucket: its figures are the grant's, but what it admits
	// after a refund is exact.
	t.Run("Lease/buckets", func(t *testing.T) {
		for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
			refusedThenRefunded(t, leBuckets, alg, fmt.Sprintf("lease-buckets/%d/%v", time.Now().UnixNano(), alg))
		}
	})
}

// refusedThenRefunded takes from key at t0 until refused, refunds 2, and
// requires two more requests of cost 1 to be admitted and a third refused.
func refusedThenRefunded(t *testing.T, s sluice.Store, alg sluice.Algorithm, key string) {
	t.Helper()
	ctx := context.Background()
	r := sluice.Request{Key: key, Algorithm: alg, Limit: sluice.PerMinute(4), Cost: 1, Now: sluicetest.T0}
	for i := 0; ; i++ {
		d, err := s.Take(ctx, r)
		if err != nil {
			t.Fatalf("%v: take #%d: %v", alg, i, err)
		}
		if !d.Allowed {
			break
		}
		if i > 10 {
			t.Fatalf("%v: take #%d admitted, want refused at the limit", alg, i)
		}
	}
	q := r
	q.Cost = 2
	if _, err := s.(sluice.Refunder).Refund(ctx, q); err != nil {
		t.Fatalf("%v: Refund(2): %v", alg, err)
	}
	for i, want := range []bool{true, true, false} {
		if d, err := s.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("%v: take #%d after Refund(2) at the limit = %+v, %v; want Allowed %v", alg, i, d, err, want)
		}
	}
}

// TestRefundUnsupported: a decorator over a store without Refund gives
// nothing back and says so with errors.ErrUnsupported.
func TestRefundUnsupported(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	plain := plainStore{rs}
	f := fleet.NewFallback(plain, fleet.FallbackOptions{})
	t.Cleanup(f.Close)
	for _, st := range []struct {
		name string
		s    sluice.Store
	}{
		{"OverLimitCache", fleet.NewOverLimitCache(plain, fleet.OverLimitOptions{})},
		{"Fallback", f},
	} {
		r := sluice.Request{Key: fmt.Sprintf("unsupported/%d/%s", time.Now().UnixNano(), st.name), Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(2), Cost: 1, Now: sluicetest.T0}
		for range 2 {
			if _, err := st.s.Take(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.s.(sluice.Refunder).Refund(context.Background(), r); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s over a store without Refund: Refund error %v, want one wrapping errors.ErrUnsupported", st.name, err)
		}
		if d, err := rs.Take(context.Background(), r); err != nil || d.Allowed {
			t.Errorf("%s: after an unsupported Refund, the store's Take = %+v, %v; want refused (nothing given back)", st.name, d, err)
		}
	}
}

// TestOverLimitCacheRefundOtherInstance: a refund through one instance's
// cache makes that cache forget the key's refusal; another instance's
// cache over the same store still refuses the key from memory until the
// RetryAfter it remembered, as documented.
func TestOverLimitCacheRefundOtherInstance(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	a := fleet.NewOverLimitCache(rs, fleet.OverLimitOptions{})
	b := fleet.NewOverLimitCache(rs, fleet.OverLimitOptions{})
	ctx := context.Background()
	r := sluice.Request{Key: fmt.Sprintf("other/%d", time.Now().UnixNano()), Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(2), Cost: 1, Now: sluicetest.T0}
	for _, c := range []*fleet.OverLimitCache{a, a, a, b} {
		if _, err := c.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if a.Stored() != 1 || b.Stored() != 1 {
		t.Fatalf("refusals remembered: a %d, b %d; want 1 each", a.Stored(), b.Stored())
	}
	if _, err := a.Refund(ctx, r); err != nil {
		t.Fatal(err)
	}
	hits := b.Hits()
	if d, err := b.Take(ctx, r); err != nil || d.Allowed || b.Hits() != hits+1 {
		t.Errorf("instance b after a refund through a: Take = %+v, %v, hits %d → %d; want refused from its cache", d, err, hits, b.Hits())
	}
	if d, err := a.Take(ctx, r); err != nil || !d.Allowed {
		t.Errorf("instance a after its refund: Take = %+v, %v; want admitted", d, err)
	}
}

// TestSyncRefundSendsHitsFirst: units a Sync admitted locally, not yet
// sent, are in the shared store before the refund gives them back: the
// store then counts what it counted before they were taken. Given back
// first, the store (which had not counted them) would have found less to
// give back, and the hits sent after would have stayed counted.
func TestSyncRefundSendsHitsFirst(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	sy := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour}) // no batch but the refund's
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindowCounter} {
		r := sluice.Request{Key: fmt.Sprintf("sync-refund/%d/%v", time.Now().UnixNano(), alg), Algorithm: alg, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}
		local := sy.Stats().Local
		// The first two are decided in the store (cold, then the entry's
		// first read); the next three locally.
		for _, cost := range []int64{1, 1, 3} {
			r.Cost = cost
			if d, err := sy.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("%v: take %d = %+v, %v", alg, cost, d, err)
			}
		}
		if st := sy.Stats(); st.Local == local {
			t.Fatalf("%v: no local decision (%+v): the test needs hits not yet sent", alg, st)
		}
		r.Cost = 3
		if _, err := sy.Refund(ctx, r); err != nil {
			t.Fatalf("%v: Refund(3): %v", alg, err)
		}
		if err := sy.Flush(); err != nil {
			t.Fatal(err)
		}
		r.Cost = 0
		if d, err := rs.Take(ctx, r); err != nil || d.Remaining != 8 {
			t.Errorf("%v: the store after takes of 1, 1, 3 and Refund(3) through Sync: Remaining %d, %v; want 8", alg, d.Remaining, err)
		}
	}
}
