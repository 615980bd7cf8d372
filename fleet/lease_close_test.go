package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseCloseLapsedBucketUnits: a bucket's units lapse as it refills
// past them; Close must not give those back, or it erases debt that other
// instances' admissions left since and the fleet passes the burst.
func TestLeaseCloseLapsedBucketUnits(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	store := openShared(t, []string{srv.Addr}, false)
	now := sluicetest.T0
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		l, err := fleet.NewLease(openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: 10})
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Key: "lapsed/" + alg.String(), Algorithm: alg, Limit: sluice.PerHour(10), Cost: 1, Now: now.Add(-time.Hour)}
		// An hour ago: the first request is decided in the store, the
		// second reserves the other 9 tokens and spends one.
		for i := range 2 {
			if d, err := l.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("%s: Take #%d an hour ago = %+v, %v; want allowed", alg, i, d, err)
			}
		}
		if st := l.Stats(); st.Granted-st.Spent != 8 {
			t.Fatalf("%s: Stats = %+v; want 8 units held", alg, st)
		}
		// Now the bucket is full again (the 8 units have lapsed), and
		// another instance takes all of it.
		all := r
		all.Now, all.Cost = now, 10
		if d, err := store.Take(ctx, all); err != nil || !d.Allowed {
			t.Fatalf("%s: Take of the whole burst now = %+v, %v; want allowed", alg, d, err)
		}
		if err := l.CloseAt(now); err != nil {
			t.Fatal(err)
		}
		one := r
		one.Now = now
		if d, err := store.Take(ctx, one); err != nil || d.Allowed {
			t.Fatalf("%s: Take after Close = %+v, %v; want refused: the burst was taken, and the lease's units had lapsed", alg, d, err)
		}
	}
}

// TestLeaseCloseAt: Close gives back the units held that are still good at
// the time it is given, on the requests' clock: here the whole lease but
// the unit spent, a minute after it was reserved.
func TestLeaseCloseAt(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	store := openShared(t, []string{srv.Addr}, false)
	t0 := sluicetest.T0.Add(10 * time.Minute)
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindowCounter} {
		l, err := fleet.NewLease(openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: 10})
		if err != nil {
			t.Fatal(err)
		}
		r := sluice.Request{Key: "at/" + alg.String(), Algorithm: alg, Limit: sluice.PerHour(10), Cost: 1, Now: t0}
		// The first request is decided in the store, the second reserves
		// the other 9 units and spends one.
		for i := range 2 {
			if d, err := l.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("%s: Take #%d = %+v, %v; want allowed", alg, i, d, err)
			}
		}
		if err := l.CloseAt(t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.Returned != 8 {
			t.Errorf("%s: %d units given back a minute after the reservation, want the 8 held", alg, st.Returned)
		}
		// The store has the 8 back: 2 of 10 spent.
		r.Now = t0.Add(time.Minute)
		for _, tc := range []struct {
			cost    int64
			allowed bool
		}{{8, true}, {1, false}} {
			r.Cost = tc.cost
			if d, err := store.Take(ctx, r); err != nil || d.Allowed != tc.allowed {
				t.Errorf("%s: Take of %d after Close = %+v, %v; want allowed %v", alg, tc.cost, d, err, tc.allowed)
			}
		}
	}
}
