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
	ctx := context.Background()
	o := redisstore.Options{Addrs: []string{srv.Addr}, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	la, lb := newLease(t, a, fleet.LeaseOptions{Chunk: 3}), newLease(t, b, fleet.LeaseOptions{Chunk: 3})
	cb := fleet.NewOverLimitCache(lb, fleet.OverLimitOptions{})
	fb := &feedEvents{RefundFeed: fleet.NewRefundFeed(cb, lb), forgot: make(chan string, 100), resumed: make(chan struct{}, 100)}
	watchRefunds(t, b, fb, fb.resumed)

	r := sluice.Request{Namespace: "api", Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(6), Cost: 1, Now: sluicetest.T0}
	take := func(who string, s sluice.Store, want bool) {
		t.Helper()
		if d, err := s.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("%s: Take(%q) = %+v, %v; want Allowed %v", who, r.Key, d, err, want)
		}
	}
	take("A", la, true) // decided in Redis: 1 counted
	take("A", la, true) // reserves 3 (4 counted), spends 1: holds 2
	take("B", cb, true) // decided in Redis: 5
	take("B", cb, true) // reserves the 1 left: 6
	take("B", cb, false)
	take("B", cb, false) // from the cache
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want 1", got)
	}
	calls := lb.Stats().Calls
	take("B", lb, false) // the lease on its own
	if got := lb.Stats().Calls; got != calls {
		t.Fatalf("B's lease asked Redis %d times more; want 0 (it refuses on its own)", got-calls)
	}
	if err := la.CloseAt(sluicetest.T0); err != nil {
		t.Fatalf("A: CloseAt: %v", err)
	}
	if got := await(t, fb.forgot, "give-back message at B"); got != "apik" {
		t.Fatalf("B was told of a give-back of %q; want %q", got, "apik")
	}
	take("B", cb, true) // a unit A gave back
	take("B", cb, true) // the other
	take("B", cb, false)
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want still 1", got)
	}
}
