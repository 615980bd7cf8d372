package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// cacheFeed is a RefundListener that passes what WatchRefunds says on
// to an OverLimitCache and tells the test of it.
type cacheFeed struct {
	*fleet.OverLimitCache
	forgot  chan string
	resumed chan struct{}
}

func (f *cacheFeed) ForgetKey(ns, key string) {
	f.OverLimitCache.ForgetKey(ns, key)
	f.forgot <- ns + key
}

func (f *cacheFeed) Resume() {
	f.OverLimitCache.Resume()
	f.resumed <- struct{}{}
}

// awaitOne waits for a value on ch; it fails the test after a minute.
func awaitOne[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
		panic("unreachable")
	}
}

// TestTakeAllGiveBackReachesOtherCaches: two instances, each with its own
// OverLimitCache over one 3-node Cluster. A's TakeAll of a and b (keys
// in different slots) passes its check; then another client fills b, so
// b's take refuses and a's, which counted, is given back. Between A's
// take and its give-back, B asks for a and Redis refuses it (A's take
// holds the window's last unit): B remembers the refusal. After the
// give-back Redis admits a again; the give-back's script publishes a as
// a refund's does, so B's cache forgets it and B's next request is
// admitted (B used to refuse it from its cache for the rest of the hour).
func TestTakeAllGiveBackReachesOtherCaches(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := redisstore.Options{Addrs: cl.Addrs, Cluster: true, PublishRefunds: true}
	sa, sb, other := open(t, o), open(t, o), open(t, o)
	ca := fleet.NewOverLimitCache(sa, fleet.OverLimitOptions{})
	cb := &cacheFeed{OverLimitCache: fleet.NewOverLimitCache(sb, fleet.OverLimitOptions{}), forgot: make(chan string, 100), resumed: make(chan struct{}, 100)}
	done := make(chan error, 1)
	go func() { done <- sb.WatchRefunds(ctx, cb) }()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("WatchRefunds = %v; want context.Canceled", err)
		}
	}()
	awaitOne(t, cb.resumed, "subscription")

	req := func(key string, cost int64) sluice.Request {
		return sluice.Request{Namespace: "api", Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(2), Cost: cost, Now: sluicetest.T0}
	}
	a, b := "a", ""
	for i := 0; b == "" || redisstore.Slot(sa.KeyOf(&sluice.Request{Namespace: "api", Key: a})) == redisstore.Slot(sa.KeyOf(&sluice.Request{Namespace: "api", Key: b})); i++ {
		b = fmt.Sprintf("b%d", i)
	}
	take := func(who string, s sluice.Store, r sluice.Request, want bool) {
		t.Helper()
		if d, err := s.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("%s: Take(%q, cost %d) = %+v, %v; want Allowed %v", who, r.Key, r.Cost, d, err, want)
		}
	}
	take("A", ca, req(a, 1), true) // 1 of 2 counted on a
	redisstore.SetTakeAllHooks(t, func() {
		take("another client", other, req(b, 2), true) // b full: A's take of b refuses
	}, func() {
		take("B", cb, req(a, 1), false) // A's take holds a's last unit
		take("B", cb, req(a, 1), false) // from B's cache
	})
	ds := make([]sluice.Decision, 2)
	err := ca.TakeAll(ctx, []sluice.Request{req(a, 1), req(b, 1)}, ds)
	redisstore.SetTakeAllHooks(t, nil, nil)
	if err != nil || ds[1].Allowed || sa.Refunds() != 1 {
		t.Fatalf("A: TakeAll = %+v, %v, %d refunds; want b refused and a given back", ds, err, sa.Refunds())
	}
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want 1 (the refusal remembered)", got)
	}
	if got := awaitOne(t, cb.forgot, "give-back message at B"); got != "api"+a {
		t.Fatalf("B was told of a give-back of %q; want %q", got, "api"+a)
	}
	take("B", cb, req(a, 1), true) // the unit A's take held
	take("B", cb, req(a, 1), false)
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want still 1", got)
	}
}

// TestTakeAllRefundPublishesOnlyWhatItGave: a cross-slot TakeAll whose
// later slot refuses gives back what the others counted, and publishes
// each key it gave units back to, one PUBLISH per key, but none for a
// key it gave nothing back to (a request of cost 0, which counted
// nothing): the other instances' caches lose nothing to forget. It used
// to publish every key of the slots it refunded.
func TestTakeAllRefundPublishesOnlyWhatItGave(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	o := redisstore.Options{Addrs: cl.Addrs, Cluster: true, PublishRefunds: true}
	s, other := open(t, o), open(t, o)
	publishes := func() (n int64) {
		for _, addr := range cl.Addrs {
			n += calls(t, addr, "publish")
		}
		return n
	}
	req := func(key string, cost int64) sluice.Request {
		return sluice.Request{Namespace: "api", Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(2), Cost: cost, Now: sluicetest.T0}
	}
	slotOf := func(key string) uint16 { return redisstore.Slot(s.KeyOf(&sluice.Request{Namespace: "api", Key: key})) }
	for i, c := range []struct {
		cost     int64 // of the request on a, whose slot is refunded
		want     int64 // PUBLISH calls
		refunded int64 // units of a's left after
	}{
		{cost: 0, want: 0, refunded: 2},
		{cost: 1, want: 1, refunded: 2},
	} {
		a, b := fmt.Sprintf("a%d", i), ""
		for j := 0; b == "" || slotOf(a) == slotOf(b); j++ {
			b = fmt.Sprintf("b%d-%d", i, j)
		}
		redisstore.SetTakeAllHooks(t, func() {
			if d, err := other.Take(ctx, req(b, 2)); err != nil || !d.Allowed {
				t.Errorf("another client: Take(%q) = %+v, %v", b, d, err)
			}
		}, nil)
		before := publishes()
		ds := make([]sluice.Decision, 2)
		err := s.TakeAll(ctx, []sluice.Request{req(a, c.cost), req(b, 1)}, ds)
		redisstore.SetTakeAllHooks(t, nil, nil)
		if err != nil || ds[1].Allowed || s.Refunds() != uint64(i+1) {
			t.Fatalf("cost %d: TakeAll = %+v, %v, %d refunds; want b refused and a's slot refunded", c.cost, ds, err, s.Refunds())
		}
		if got := publishes() - before; got != c.want {
			t.Errorf("cost %d: the refund ran %d PUBLISH; want %d", c.cost, got, c.want)
		}
		if d, err := s.Take(ctx, req(a, 0)); err != nil || d.Remaining != c.refunded {
			t.Errorf("cost %d: a after the refund: %+v, %v; want %d remaining", c.cost, d, err, c.refunded)
		}
	}
}
