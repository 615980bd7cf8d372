package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncTakeAllDeniedRetryAfter: when Sync's own request of a TakeAll is
// denied, it asks the store's requests without counting, and one whose cost
// does not fit what is left is denied too: its RetryAfter must say how long
// to wait (a denied decision with RetryAfter 0 reads "retry now"), and never
// less than the store would.
func TestSyncTakeAllDeniedRetryAfter(t *testing.T) {
	srv := redistest.StartServer(t)
	st := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	s := newSync(t, st, fleet.SyncOptions{Interval: time.Hour}) // the loop never fires
	ctx := context.Background()
	at := func(i int) time.Time { return sluicetest.T0.Add(time.Duration(i) * time.Millisecond) }
	local := sluice.Request{Key: "retry/local", Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(2), Cost: 1}
	remote := sluice.Request{Key: "retry/remote", Algorithm: sluice.SlidingWindowLog, Limit: sluice.PerHour(5), Cost: 3}
	for i := range 2 { // the first cold (decided in Redis), the second held
		local.Now = at(i)
		if d, err := s.Take(ctx, local); err != nil || !d.Allowed {
			t.Fatalf("local request %d: %+v, %v; want allowed", i, d, err)
		}
	}
	remote.Now = at(2)
	if d, err := s.Take(ctx, remote); err != nil || !d.Allowed {
		t.Fatalf("remote request: %+v, %v; want allowed", d, err)
	}
	local.Now, remote.Now = at(3), at(3)
	ds := make([]sluice.Decision, 2)
	if err := s.TakeAll(ctx, []sluice.Request{local, remote}, ds); err != nil {
		t.Fatal(err)
	}
	// The store alone: 3 more of 5 an hour, 3 logged at t0+2ms.
	want := time.Hour - time.Millisecond
	if ds[0].Allowed || ds[1].Allowed || ds[1].RetryAfter != want {
		t.Errorf("TakeAll(local over its limit, remote cost 3 with 2 left) = %+v; want both denied, the remote with RetryAfter %v", ds, want)
	}
}
