package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLeaseCloseLapsedBucketUnits: a bucket's units lapse as it refills
// past them; Close must not give those back, or it erases debt that other
// instances' admissions left since and the fleet passes the burst.
func TestLeaseCloseLapsedBucketUnits(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	store := openShared(t, []string{srv.Addr}, false)
	// Close reads the wall clock: the requests are on it too. A token
	// comes every 6 minutes, far more than the test takes.
	now := time.Now()
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
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		one := r
		one.Now = time.Now()
		if d, err := store.Take(ctx, one); err != nil || d.Allowed {
			t.Fatalf("%s: Take after Close = %+v, %v; want refused: the burst was taken, and the lease's units had lapsed", alg, d, err)
		}
	}
}
