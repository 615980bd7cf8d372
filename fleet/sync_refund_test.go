package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncRefundTakesLocalHitsFirst: a refund on a key Sync decides
// locally takes its units out of the key's hits not yet sent, with no
// round trip to the store, and keeps the key local; only what those hits
// do not cover is given back in the store, before Refund returns. After
// the batch, the store counts what the instance admitted less what it
// gave back.
func TestSyncRefundTakesLocalHitsFirst(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	sy := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour}) // no batch but Flush's
	ctx := context.Background()
	// Load the refund's script first: a first EVALSHA fails (NOSCRIPT)
	// and is sent again as EVAL, two calls.
	if _, err := rs.Refund(ctx, sluice.Request{Key: "prime", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}); err != nil {
		t.Fatal(err)
	}
	// Not the sliding window counter: its refunds take the exact path, a
	// batch first (see refundPastUnsent).
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow} {
		r := sluice.Request{Key: fmt.Sprintf("sync-refund-local/%d/%v", time.Now().UnixNano(), alg), Algorithm: alg, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}
		// The first two are decided in the store (cold, then the entry's
		// first read); the next three locally: 3 units not yet sent.
		for i := range 5 {
			if d, err := sy.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("%v: take #%d = %+v, %v", alg, i, d, err)
			}
		}
		stored := func(want int64, when string) {
			t.Helper()
			q := r
			q.Cost = 0
			if d, err := rs.Take(ctx, q); err != nil || d.Remaining != want {
				t.Errorf("%v: the store %s: Remaining %d, %v; want %d", alg, when, d.Remaining, err, want)
			}
		}
		scripts := evalCalls(t, srv.Addr)
		r.Cost = 2
		if d, err := sy.Refund(ctx, r); err != nil || d.Remaining != 7 {
			t.Fatalf("%v: Refund(2) with 3 units not yet sent = %+v, %v; want Remaining 7", alg, d, err)
		}
		if n := evalCalls(t, srv.Addr) - scripts; n != 0 {
			t.Errorf("%v: Refund(2) with 3 units not yet sent ran %d scripts in Redis, want 0", alg, n)
		}
		stored(8, "after Refund(2) out of the hits not yet sent (2 counted there)")
		local := sy.Stats().Local
		r.Cost = 1
		if d, err := sy.Take(ctx, r); err != nil || !d.Allowed || d.Remaining != 6 {
			t.Errorf("%v: take after the refund = %+v, %v; want admitted, Remaining 6", alg, d, err)
		}
		if sy.Stats().Local != local+1 {
			t.Errorf("%v: the take after the refund was not decided locally (%+v)", alg, sy.Stats())
		}
		// 2 units not yet sent: Refund(3) gives 1 back in the store.
		scripts = evalCalls(t, srv.Addr)
		r.Cost = 3
		if d, err := sy.Refund(ctx, r); err != nil || d.Remaining != 9 {
			t.Fatalf("%v: Refund(3) with 2 units not yet sent = %+v, %v; want Remaining 9", alg, d, err)
		}
		if n := evalCalls(t, srv.Addr) - scripts; n != 1 {
			t.Errorf("%v: Refund(3) with 2 units not yet sent ran %d scripts in Redis, want 1 (the rest's refund)", alg, n)
		}
		stored(9, "right after Refund(3), 1 of it given back there")
		if err := sy.Flush(); err != nil {
			t.Fatal(err)
		}
		stored(9, "after the batch (6 admitted, 5 given back)")
	}
}

// gatedSync holds the next batch (Sync call) once armed, until release is
// closed, and notes a refund that reaches it while it holds one.
type gatedSync struct {
	*redisstore.Store
	armed    atomic.Bool
	holding  atomic.Bool // a batch is held (the test clears it before release)
	overtook atomic.Bool // a refund reached the store while a batch was held
	entered  chan struct{}
	release  chan struct{}
}

func (g *gatedSync) Sync(ctx context.Context, ops []redisstore.SyncOp) error {
	if g.armed.Swap(false) {
		g.holding.Store(true)
		close(g.entered)
		<-g.release
	}
	return g.Store.Sync(ctx, ops)
}

func (g *gatedSync) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if g.holding.Load() {
		g.overtook.Store(true)
	}
	return g.Store.Refund(ctx, r)
}

// doneWatched is a context that tells (called) when someone first waits
// on it.
type doneWatched struct {
	context.Context
	once   sync.Once
	called chan struct{}
}

func (c *doneWatched) Done() <-chan struct{} {
	c.once.Do(func() { close(c.called) })
	return c.Context.Done()
}

// TestSyncRefundAfterHitsInFlight: a refund of more units than the key's
// hits not yet sent, while a batch carrying its earlier hits is on its
// way, gives back in the store only once that batch has landed: reaching
// the store first, it would find less to give back (the hits in flight
// not counted yet) and the batch would then count them after it.
func TestSyncRefundAfterHitsInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	g := &gatedSync{Store: rs, entered: make(chan struct{}), release: make(chan struct{})}
	sy := newSync(t, g, fleet.SyncOptions{Interval: time.Hour})
	ctx := context.Background()
	r := sluice.Request{Key: fmt.Sprintf("sync-refund-inflight/%d", time.Now().UnixNano()), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}
	// Two decided in the store, three locally.
	for i := range 5 {
		if d, err := sy.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("take #%d = %+v, %v", i, d, err)
		}
	}
	g.armed.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- sy.Flush() }()
	<-g.entered // the three local hits are on their way
	wctx := &doneWatched{Context: ctx, called: make(chan struct{})}
	refunded := make(chan error, 1)
	q := r
	q.Cost = 4
	go func() {
		_, err := sy.Refund(wctx, q)
		refunded <- err
	}()
	// Release the batch once the refund waits (on its context) or, if it
	// does not wait, once it has reached the store and returned.
	var err error
	select {
	case <-wctx.called:
		g.holding.Store(false)
		close(g.release)
		err = <-refunded
	case err = <-refunded:
		g.holding.Store(false)
		close(g.release)
	}
	if err != nil {
		t.Fatalf("Refund(4): %v", err)
	}
	if g.overtook.Load() {
		t.Error("the refund reached the store while the batch with the key's hits was on its way")
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	q.Cost = 0
	if d, err := rs.Take(ctx, q); err != nil || d.Remaining != 9 {
		t.Errorf("the store after 5 admitted and Refund(4): Remaining %d, %v; want 9", d.Remaining, err)
	}
}

// TestSyncRefundHonoursContext: a refund that must wait for a batch in
// flight (which carries the key's hits: the store must count them before
// it gives back) gives up when its context ends, and gives nothing back.
func TestSyncRefundHonoursContext(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	g := &gatedSync{Store: rs, entered: make(chan struct{}), release: make(chan struct{})}
	sy := newSync(t, g, fleet.SyncOptions{Interval: time.Hour})
	ctx := context.Background()
	r := sluice.Request{Key: fmt.Sprintf("sync-refund-ctx/%d", time.Now().UnixNano()), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}
	for i := range 3 {
		if d, err := sy.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("take #%d = %+v, %v", i, d, err)
		}
	}
	g.armed.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- sy.Flush() }()
	<-g.entered // the third take's hit is on its way
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := sy.Refund(cancelled, r)
	close(g.release)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("Refund with its context ended while the key's batch is in flight: %v; want an error wrapping context.Canceled and sluice.ErrStoreUnavailable", err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	q := r
	q.Cost = 0
	if d, err := rs.Take(ctx, q); err != nil || d.Remaining != 7 {
		t.Errorf("the store after the batch and the cancelled refund: Remaining %d, %v; want 7 (nothing given back)", d.Remaining, err)
	}
}
