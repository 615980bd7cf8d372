package fleet_test

import (
	"testing"

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
	t.Parallel() // a Cluster (or Redis) and stores of its own
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
	o := redisstore.Options{Addrs: addrs, Cluster: cluster, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	la := newLease(t, a, fleet.LeaseOptions{Chunk: 3})
	ca := fleet.NewOverLimitCache(la, fleet.OverLimitOptions{})
	cb := fleet.NewOverLimitCache(b, fleet.OverLimitOptions{})
	wb := newWatchEvents(cb)
	watchRefunds(t, b, wb, wb.resumed)

	giveBack{a: ca, b: cb, la: la, back: func() error { return back(la) }, forgot: wb.forgot,
		laStats: true, bCache: cb}.run(t)
}
