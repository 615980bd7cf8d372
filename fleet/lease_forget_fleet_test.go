package fleet_test

import (
	"testing"

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
	t.Parallel() // a Cluster (or Redis) and stores of its own
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
	o := redisstore.Options{Addrs: addrs, Cluster: cluster, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	la, lb := newLease(t, a, fleet.LeaseOptions{Chunk: 3}), newLease(t, b, fleet.LeaseOptions{Chunk: 3})
	fb := &leaseFeed{l: lb, forgot: make(chan string, 100), resumed: make(chan struct{}, 100)}
	watchRefunds(t, b, fb, fb.resumed)

	giveBack{a: la, b: lb, la: la, back: func() error { return la.CloseAt(sluicetest.T0) }, forgot: fb.forgot,
		bLease: lb}.run(t)
}
