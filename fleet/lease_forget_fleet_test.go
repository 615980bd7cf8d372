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

// leaseFeed is a redisstore.RefundListener that tells a Lease of the
// give-backs published, and the test of each.
type leaseFeed struct {
	l       *fleet.Lease
	forgot  chan string
	resumed chan struct{}
}

func (f *leaseFeed) ForgetKey(ns, key string) {
	f.l.ForgetKey(ns, key)
	f.forgot <- ns + key
}
func (f *leaseFeed) Pause()  {}
func (f *leaseFeed) Resume() { f.resumed <- struct{}{} }

// TestLeaseSeesGiveBackElsewhere: two instances with leases of one key
// over one Redis (and a 3-node Cluster). B takes what A left and is
// refused: Redis has nothing left, and B's lease refuses on its own until
// the window ends. A then hands its 2 unspent units back (shutdown); told
// of it (WatchRefunds), B's lease asks Redis again and admits them. It
// used to refuse them until the end of the hour.
func TestLeaseSeesGiveBackElsewhere(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		testLeaseSeesGiveBack(t, []string{srv.Addr}, false)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		testLeaseSeesGiveBack(t, cl.Addrs, true)
	})
}

func testLeaseSeesGiveBack(t *testing.T, addrs []string, cluster bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := redisstore.Options{Addrs: addrs, Cluster: cluster, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	la, lb := newLease(t, a, fleet.LeaseOptions{Chunk: 3}), newLease(t, b, fleet.LeaseOptions{Chunk: 3})
	fb := &leaseFeed{l: lb, forgot: make(chan string, 100), resumed: make(chan struct{}, 100)}
	watchRefunds(t, b, fb, fb.resumed)

	r := sluice.Request{Namespace: "api", Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(6), Cost: 1, Now: sluicetest.T0}
	take := func(who string, l *fleet.Lease, want bool) {
		t.Helper()
		if d, err := l.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("%s: Take(%q) = %+v, %v; want Allowed %v", who, r.Key, d, err, want)
		}
	}
	take("A", la, true) // decided in Redis: 1 counted
	take("A", la, true) // reserves 3 (4 counted), spends 1: holds 2
	take("B", lb, true) // decided in Redis: 5
	take("B", lb, true) // reserves the 1 left: 6
	take("B", lb, false)
	calls := lb.Stats().Calls
	take("B", lb, false) // on its own
	if got := lb.Stats().Calls; got != calls {
		t.Fatalf("B's lease asked Redis %d times more; want 0 (it refuses on its own)", got-calls)
	}
	if err := la.CloseAt(sluicetest.T0); err != nil {
		t.Fatalf("A: CloseAt: %v", err)
	}
	if got := await(t, fb.forgot, "give-back message at B"); got != "apik" {
		t.Fatalf("B was told of a give-back of %q; want %q", got, "apik")
	}
	take("B", lb, true) // a unit A gave back
	take("B", lb, true) // the other
	take("B", lb, false)
}
