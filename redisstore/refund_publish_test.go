package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// heard is a RefundListener that tells the test of each key published.
type heard struct {
	keys    chan string
	resumed chan struct{}
}

func (h *heard) ForgetKey(ns, key string) { h.keys <- ns + key }
func (h *heard) Pause()                   {}
func (h *heard) Resume()                  { h.resumed <- struct{}{} }

// TestLeaseGiveBacksPublished: with PublishRefunds a lease's units given
// back (Return, and the expired units a grant gives back first) publish
// their key on RefundChannel, as a refund does, when they leave the key
// counting less: not when they count no more anyway (a window that has
// passed, a bucket that refilled past them), nor without PublishRefunds.
// On one server the messages come in the order of the scripts, so a
// refund of a last key shows that nothing else was published before it.
func TestLeaseGiveBacksPublished(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := open(t, redisstore.Options{Addrs: []string{srv.Addr}, PublishRefunds: true})
	q := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	h := &heard{keys: make(chan string, 100), resumed: make(chan struct{}, 100)}
	done := make(chan error, 1)
	go func() { done <- p.WatchRefunds(ctx, h) }()
	defer func() {
		cancel()
		<-done
	}()
	awaitOne(t, h.resumed, "subscription")

	t0, t1 := sluicetest.T0, sluicetest.T0.Add(time.Minute)
	l := sluice.PerMinute(10)
	req := func(key string, alg sluice.Algorithm, cost int64, at time.Time) sluice.Request {
		return sluice.Request{Namespace: "api", Key: key, Algorithm: alg, Limit: l, Cost: cost, Now: at}
	}
	op := func(key string, alg sluice.Algorithm, units, window int64, at time.Time) redisstore.ReturnOp {
		return redisstore.ReturnOp{Namespace: "api", Key: key, Algorithm: alg, Limit: l, Units: units, Window: window, Now: at}
	}
	lease := func(s *redisstore.Store, r sluice.Request, back redisstore.ReturnOp) redisstore.Grant {
		t.Helper()
		g, err := s.Lease(ctx, r, back)
		if err != nil {
			t.Fatalf("Lease(%q, cost %d, back %d): %v", r.Key, r.Cost, back.Units, err)
		}
		return g
	}
	ret := func(s *redisstore.Store, o redisstore.ReturnOp) {
		t.Helper()
		if err := s.Return(ctx, []redisstore.ReturnOp{o}); err != nil {
			t.Fatalf("Return(%q, %d units): %v", o.Key, o.Units, err)
		}
	}
	expect := func(key string) {
		t.Helper()
		if got := awaitOne(t, h.keys, "message of "+key); got != "api"+key {
			t.Fatalf("published %q; want %q", got, "api"+key)
		}
	}

	g := lease(p, req("fw", sluice.FixedWindow, 4, t0), redisstore.ReturnOp{})
	ret(p, op("fw", sluice.FixedWindow, 2, g.State.T, t0))
	expect("fw")
	ret(q, op("fw", sluice.FixedWindow, 1, g.State.T, t0))                                         // no PublishRefunds
	lease(p, req("fw", sluice.FixedWindow, 1, t1), op("fw", sluice.FixedWindow, 1, g.State.T, t0)) // its window passed

	g = lease(p, req("sw", sluice.SlidingWindowCounter, 4, t0), redisstore.ReturnOp{})
	lease(p, req("sw", sluice.SlidingWindowCounter, 1, t1), op("sw", sluice.SlidingWindowCounter, 2, g.State.T, t0)) // weighs on the next
	expect("sw")

	g = lease(p, req("tb", sluice.TokenBucket, 2, t0), redisstore.ReturnOp{})
	ret(p, op("tb", sluice.TokenBucket, 2, g.State.T, t0.Add(10*time.Minute))) // refilled
	lease(p, req("tb", sluice.TokenBucket, 2, t1), redisstore.ReturnOp{})
	ret(p, op("tb", sluice.TokenBucket, 1, 0, t1))
	expect("tb")

	lease(p, req("gc", sluice.GCRA, 2, t0), redisstore.ReturnOp{})
	ret(p, op("gc", sluice.GCRA, 1, 0, t0))
	expect("gc")

	// A refund publishes only what it gives back: "last" must count one.
	if d, err := p.Take(ctx, req("last", sluice.FixedWindow, 1, t0)); err != nil || !d.Allowed {
		t.Fatalf("Take: %+v, %v", d, err)
	}
	if _, err := p.Refund(ctx, req("last", sluice.FixedWindow, 1, t0)); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	expect("last")
}
