package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// TestCallGate: the gate counts calls until their request comes or they
// end, refuses past max, and a call that ended makes room for the next
// without waiting for reapEvery refusals.
func TestCallGate(t *testing.T) {
	g := newCallGate(3)
	var cancels []context.CancelFunc
	var ctxs []context.Context
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		c, err := g.tap(ctx, nil)
		if err != nil {
			t.Fatalf("tap %d of max 3: %v", len(ctxs)+1, err)
		}
		ctxs, cancels = append(ctxs, c), append(cancels, cancel)
	}
	if _, err := g.tap(context.Background(), nil); err == nil || g.refused.Load() != 1 {
		t.Fatalf("a 4th call at max 3: %v, refused %d; want refused", err, g.refused.Load())
	}
	// The oldest ends (its client went away): the next call takes its place.
	cancels[0]()
	if _, err := g.tap(context.Background(), nil); err != nil {
		t.Fatalf("after the oldest call ended: %v, want admitted", err)
	}
	// A request that comes takes its call out of the count.
	g.arrived(ctxs[1])
	g.mu.Lock()
	n := g.n
	g.mu.Unlock()
	if n != 2 {
		t.Fatalf("after one request came: %d counted, want 2", n)
	}
	// A newer call ends while the oldest still waits: found by a reap
	// once every reapEvery refusals at most.
	newest, cancel := context.WithCancel(context.Background())
	if _, err := g.tap(newest, nil); err != nil { // full again
		t.Fatal(err)
	}
	cancel() // the oldest, ctxs[2], still waits
	admitted := false
	for i := range reapEvery + 1 {
		if _, err := g.tap(context.Background(), nil); err == nil {
			admitted = true
			break
		} else if i == reapEvery {
			t.Fatalf("%d refusals after a call ended, want a reap within %d", i+1, reapEvery)
		}
	}
	if !admitted {
		t.Fatal("no call admitted after a call ended")
	}
}

// TestCallGateOthers: calls other than the rate limit service's take at
// most half of max, the rate limit service's the rest, and an other call
// that ended makes room for the next.
func TestCallGateOthers(t *testing.T) {
	g := newCallGate(4)
	watch := &tap.Info{FullMethodName: "/grpc.health.v1.Health/Watch"}
	rls := &tap.Info{FullMethodName: rlsMethod}
	first, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, ctx := range []context.Context{first, context.Background()} {
		if _, err := g.tap(ctx, watch); err != nil {
			t.Fatalf("other call %d of max 4: %v", i+1, err)
		}
	}
	if _, err := g.tap(context.Background(), watch); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 3rd other call at max 4: %v, want RESOURCE_EXHAUSTED", err)
	}
	for i := range 2 {
		if _, err := g.tap(context.Background(), rls); err != nil {
			t.Fatalf("rate limit call %d beside 2 others, max 4: %v", i+1, err)
		}
	}
	if _, err := g.tap(context.Background(), rls); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a rate limit call at max 4: %v, want RESOURCE_EXHAUSTED", err)
	}
	cancel() // the oldest other call ended
	if _, err := g.tap(context.Background(), watch); err != nil {
		t.Fatalf("an other call after one ended: %v, want admitted", err)
	}
	if g.refused.Load() != 2 || g.others != 2 || g.n != 4 {
		t.Errorf("refused %d, others %d, counted %d; want 2, 2, 4", g.refused.Load(), g.others, g.n)
	}
}
