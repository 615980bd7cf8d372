package fleet_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseGiveBackReachesOtherCaches: two instances over one Redis (and
// over a 3-node Cluster). A holds a lease of a key (a lease rule); B
// decides the key in Redis through its OverLimitCache (an exact rule: B
// reloaded before A, or a library fleet mixing both). B remembers a
// refusal; then A hands its unspent units back, on reload (ForgetAt) or
// at shutdown (CloseAt), and Redis admits the key again. The give-back's
// script publishes the key as a refund's does, so B's cache forgets it
// and B's next request is admitted (B used to refuse it from its cache
// for the rest of the hour).
func TestLeaseGiveBackReachesOtherCaches(t *testing.T) {
	for _, hb := range []struct {
		name string
		back func(*fleet.Lease) error
	}{
		{"ForgetAt", func(l *fleet.Lease) error {
			return l.ForgetAt(sluicetest.T0, func(string, string) bool { return true })
		}},
		{"CloseAt", func(l *fleet.Lease) error { return l.CloseAt(sluicetest.T0) }},
	} {
		t.Run(hb.name, func(t *testing.T) {
			t.Run("server", func(t *testing.T) {
				srv := redistest.StartServer(t)
				testLeaseGiveBackReaches(t, []string{srv.Addr}, false, hb.back)
			})
			t.Run("cluster", func(t *testing.T) {
				cl := redistest.StartCluster(t)
				testLeaseGiveBackReaches(t, cl.Addrs, true, hb.back)
			})
		})
	}
}

func testLeaseGiveBackReaches(t *testing.T, addrs []string, cluster bool, back func(*fleet.Lease) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := redisstore.Options{Addrs: addrs, Cluster: cluster, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	la := newLease(t, a, fleet.LeaseOptions{Chunk: 3})
	ca := fleet.NewOverLimitCache(la, fleet.OverLimitOptions{})
	cb := fleet.NewOverLimitCache(b, fleet.OverLimitOptions{})
	wb := newWatchEvents(cb)
	watchRefunds(t, b, wb, wb.resumed)

	r := sluice.Request{Namespace: "api", Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(6), Cost: 1, Now: sluicetest.T0}
	take := func(who string, c *fleet.OverLimitCache, want bool) {
		t.Helper()
		if d, err := c.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("%s: Take(%q) = %+v, %v; want Allowed %v", who, r.Key, d, err, want)
		}
	}
	take("A", ca, true) // the key's first: decided in Redis (1 counted)
	take("A", ca, true) // reserves 3 (4 counted), spends 1
	if st := la.Stats(); st.Granted != 3 || st.Spent != 1 {
		t.Fatalf("A's lease: %+v; want 3 granted, 1 spent", st)
	}
	take("B", cb, true) // 5
	take("B", cb, true) // 6
	take("B", cb, false)
	take("B", cb, false) // from B's cache
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want 1 (the refusal remembered)", got)
	}
	if err := back(la); err != nil {
		t.Fatalf("A: handing the lease back: %v", err)
	}
	if st := la.Stats(); st.Returned != 2 {
		t.Fatalf("A's lease: %+v; want 2 returned", st)
	}
	if got := await(t, wb.forgot, "give-back message at B"); got != "apik" {
		t.Fatalf("B was told of a give-back of %q; want %q", got, "apik")
	}
	take("B", cb, true) // a unit A gave back
	take("B", cb, true) // the other
	take("B", cb, false)
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want still 1", got)
	}
}
