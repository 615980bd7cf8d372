package fleet_test

import (
	"testing"

	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// feedEvents is a RefundFeed that tells the test of each key and
// subscription once the feed has passed it on.
type feedEvents struct {
	*fleet.RefundFeed
	forgot  chan string
	resumed chan struct{}
}

func (f *feedEvents) ForgetKey(ns, key string) {
	f.RefundFeed.ForgetKey(ns, key)
	f.forgot <- ns + key
}

func (f *feedEvents) Resume() {
	f.RefundFeed.Resume()
	f.resumed <- struct{}{}
}

// TestRefundFeedTellsTheWholeStack: B's stack is an OverLimitCache over a
// Lease, told of give-backs by one RefundFeed. B is refused a key twice
// over: its lease has nothing left and refuses on its own, and its cache
// remembers the refusal. A then hands its 2 unspent units back
// (shutdown); the one feed makes both forget the key, so B admits the 2
// units at once. Told to the cache alone, the lease would go on
// refusing until the end of the hour, and the cache would remember that
// refusal again; told to the lease alone, the cache would refuse.
func TestRefundFeedTellsTheWholeStack(t *testing.T) {
	srv := redistest.StartServer(t)
	o := redisstore.Options{Addrs: []string{srv.Addr}, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	la, lb := newLease(t, a, fleet.LeaseOptions{Chunk: 3}), newLease(t, b, fleet.LeaseOptions{Chunk: 3})
	cb := fleet.NewOverLimitCache(lb, fleet.OverLimitOptions{})
	fb := &feedEvents{RefundFeed: fleet.NewRefundFeed(cb, lb), forgot: make(chan string, 100), resumed: make(chan struct{}, 100)}
	watchRefunds(t, b, fb, fb.resumed)

	giveBack{a: la, b: cb, la: la, back: func() error { return la.CloseAt(sluicetest.T0) }, forgot: fb.forgot,
		bCache: cb, bLease: lb}.run(t)
}
