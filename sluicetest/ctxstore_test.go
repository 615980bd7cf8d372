package sluicetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestContextStoreKeepsOptionalMethods: ContextStore(memstore) stands for
// the Redis store in tests, which can Reset, take within a bound and
// refund: it
// keeps the methods the store it wraps has (refusing an ended context
// there too, counting and forgetting nothing), and has none it lacks.
func TestContextStoreKeepsOptionalMethods(t *testing.T) {
	open := func(t *testing.T) sluice.Store { return sluicetest.ContextStore(memstore.New(memstore.Options{})) }
	sluicetest.RunWithinTaker(t, open)

	ctx := context.Background()
	s := open(t)
	lim, err := sluice.NewLimiter(s, sluice.FixedWindow, sluice.PerHour(1))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.AllowAt(ctx, "k", sluicetest.T0, 1); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v, %v", d, err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := lim.Reset(ended, "k"); !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Reset with an ended context: %v; want it to wrap ErrStoreUnavailable and context.Canceled", err)
	}
	if d, err := lim.AllowAt(ctx, "k", sluicetest.T0, 0); err != nil || d.Remaining != 0 {
		t.Errorf("after a refused Reset: %+v, %v; want the count kept (remaining 0)", d, err)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if d, err := lim.AllowAt(ctx, "k", sluicetest.T0, 0); err != nil || d.Remaining != 1 {
		t.Errorf("after Reset: %+v, %v; want a fresh count (remaining 1)", d, err)
	}

	leaky := sluice.Request{Key: "q", Algorithm: sluice.LeakyBucket, Limit: sluice.PerSecond(1).WithBurst(5), Cost: 1, Now: sluicetest.T0}
	if _, _, err := s.(sluice.WithinTaker).TakeWithin(ended, leaky, time.Hour); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("TakeWithin with an ended context: %v; want ErrStoreUnavailable", err)
	}
	if d, err := s.Take(ctx, sluice.Request{Key: "q", Algorithm: leaky.Algorithm, Limit: leaky.Limit, Now: leaky.Now}); err != nil || d.Delay != 0 {
		t.Errorf("after a refused TakeWithin: %+v, %v; want nothing queued (Delay 0)", d, err)
	}

	// Refund too, over a store that has it (the reference store here).
	sluicetest.RunRefunder(t, func(t *testing.T) sluice.Store { return sluicetest.ContextStore(sluicetest.NewReference()) })
	refunding := sluicetest.ContextStore(sluicetest.NewReference())
	if _, err := refunding.(sluice.Refunder).Refund(ended, sluice.Request{Key: "r", Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(1), Cost: 1, Now: sluicetest.T0}); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("Refund with an ended context: %v; want ErrStoreUnavailable", err)
	}

	// Over a store with none of the methods, it has none.
	bare := sluicetest.ContextStore(struct{ sluice.Store }{memstore.New(memstore.Options{})})
	if _, ok := bare.(sluice.Resetter); ok {
		t.Error("ContextStore over a store without Reset is a sluice.Resetter")
	}
	if _, ok := bare.(sluice.WithinTaker); ok {
		t.Error("ContextStore over a store without TakeWithin is a sluice.WithinTaker")
	}
	if _, ok := bare.(sluice.Refunder); ok {
		t.Error("ContextStore over a store without Refund is a sluice.Refunder")
	}
}
