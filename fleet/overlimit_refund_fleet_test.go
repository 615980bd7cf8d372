package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// watchEvents is a redisstore.RefundListener in front of a cache that
// tells the test what WatchRefunds said; with hold set, it keeps the
// cache paused (a Resume is told, not passed on) until the test resumes
// it, so that what the cache does while not subscribed can be seen.
type watchEvents struct {
	c               *fleet.OverLimitCache
	forgot          chan string
	paused, resumed chan struct{}
	mu              sync.Mutex
	hold            bool
}

func newWatchEvents(c *fleet.OverLimitCache) *watchEvents {
	return &watchEvents{c: c, forgot: make(chan string, 100), paused: make(chan struct{}, 100), resumed: make(chan struct{}, 100)}
}

func (w *watchEvents) ForgetKey(ns, key string) {
	w.c.ForgetKey(ns, key)
	w.forgot <- ns + key
}

func (w *watchEvents) Pause() {
	w.c.Pause()
	w.paused <- struct{}{}
}

func (w *watchEvents) Resume() {
	w.mu.Lock()
	if !w.hold {
		w.c.Resume()
	}
	w.mu.Unlock()
	w.resumed <- struct{}{}
}

// watchRefunds makes l hear the refunds published through s until the
// test ends (and then checks that WatchRefunds ended for that reason
// alone), and returns once l has subscribed (resumed).
func watchRefunds(t *testing.T, s *redisstore.Store, l redisstore.RefundListener, resumed <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.WatchRefunds(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("WatchRefunds = %v; want context.Canceled", err)
		}
	})
	await(t, resumed, "subscription")
}

// await waits for an event on ch; it fails the test after a minute.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
		panic("unreachable")
	}
}

func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestRefundReachesOtherCaches: two instances, each with its own
// OverLimitCache over one Redis (and over a 3-node Cluster). B remembers
// a refusal; A gives a unit back; once the refund's message reaches B,
// B's next request is admitted (B used to refuse it from its cache for
// the rest of the hour). Then B's subscription is cut (CLIENT KILL): until
// it is confirmed again, B's cache answers nothing (every request goes to
// Redis, so a refund made meanwhile is seen), and once resubscribed it
// answers again.
func TestRefundReachesOtherCaches(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	t.Run("server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		testRefundReaches(t, []string{srv.Addr}, false)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		testRefundReaches(t, cl.Addrs, true)
	})
}

func testRefundReaches(t *testing.T, addrs []string, cluster bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := redisstore.Options{Addrs: addrs, Cluster: cluster, PublishRefunds: true}
	a, b := fleet.OpenRedis(t, o), fleet.OpenRedis(t, o)
	ca := fleet.NewOverLimitCache(a, fleet.OverLimitOptions{})
	cb := fleet.NewOverLimitCache(b, fleet.OverLimitOptions{})
	wb := newWatchEvents(cb)
	watchRefunds(t, b, wb, wb.resumed)
	drain(wb.paused)

	r := sluice.Request{Namespace: "api", Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(2), Cost: 1, Now: sluicetest.T0}
	take := func(who string, c *fleet.OverLimitCache, want bool) {
		t.Helper()
		if d, err := c.Take(ctx, r); err != nil || d.Allowed != want {
			t.Fatalf("%s: Take(%q) = %+v, %v; want Allowed %v", who, r.Key, d, err, want)
		}
	}
	take("B", cb, true)
	take("B", cb, true)
	take("B", cb, false) // Redis refuses; B remembers
	take("B", cb, false)
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want 1 (the refusal remembered)", got)
	}
	if _, err := ca.Refund(ctx, r); err != nil {
		t.Fatalf("A: Refund: %v", err)
	}
	if got := await(t, wb.forgot, "refund message at B"); got != "apik" {
		t.Fatalf("B was told of a refund of %q; want %q", got, "apik")
	}
	take("B", cb, true) // the unit A gave back
	if got := cb.Hits(); got != 1 {
		t.Fatalf("B's cache hits = %d; want still 1", got)
	}

	// Cut B's subscription, and keep B's cache paused once it is back.
	take("B", cb, false)
	take("B", cb, false)
	if got := cb.Hits(); got != 2 {
		t.Fatalf("B's cache hits = %d; want 2", got)
	}
	wb.mu.Lock()
	wb.hold = true
	wb.mu.Unlock()
	drain(wb.resumed)
	for _, addr := range addrs {
		killPubSub(t, addr)
	}
	await(t, wb.paused, "pause after CLIENT KILL")
	if !cb.Paused() {
		t.Fatal("B's cache not paused after its subscription was cut")
	}
	take("B", cb, false) // from Redis
	take("B", cb, false)
	if got := cb.Hits(); got != 2 {
		t.Fatalf("B's cache hits while unsubscribed = %d; want still 2 (every request asks Redis)", got)
	}
	if _, err := ca.Refund(ctx, r); err != nil { // maybe unseen by B
		t.Fatalf("A: Refund: %v", err)
	}
	take("B", cb, true)
	await(t, wb.resumed, "subscription again")
	cb.Resume()
	// Another key: A's refund above may reach B's new subscription late,
	// after a refusal of k was remembered again, and rightly forget it.
	r.Key = "k2"
	take("B", cb, true)
	take("B", cb, true)
	take("B", cb, false) // Redis refuses; B remembers
	take("B", cb, false)
	if got := cb.Hits(); got != 3 {
		t.Fatalf("B's cache hits once subscribed again = %d; want 3 (it answers again)", got)
	}
}

// killPubSub closes the connections subscribed to a channel at addr.
func killPubSub(t *testing.T, addr string) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("client to %s: %v", addr, err)
	}
	defer c.Close()
	if err := c.Do(context.Background(), c.B().Arbitrary("CLIENT", "KILL", "TYPE", "pubsub").Build()).Error(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub at %s: %v", addr, err)
	}
}
