package fleet

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// gatedShared is memShared whose batches of two keys or more wait for gate.
type gatedShared struct {
	*memShared
	gate chan struct{}
}

func (g *gatedShared) Sync(ctx context.Context, ops []redisstore.SyncOp) error {
	if len(ops) >= 2 {
		<-g.gate
	}
	return g.memShared.Sync(ctx, ops)
}

// TestSyncTakeAllWaitsForBatch: a TakeAll that holds a fresh key and finds
// the next one's view too old, in the batch in flight, must not hold the
// first while it waits for that batch: the batch settles the first key too
// (a deadlock, on a fake clock: a Redis connection cannot live in a
// synctest bubble, and the bug is in the locking, not in Redis).
func TestSyncTakeAllWaitsForBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 100 * time.Millisecond
		m := &gatedShared{memShared: newMemShared(), gate: make(chan struct{})}
		s, err := NewSync(m, SyncOptions{Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		take := allowedTaker(t, s)
		for range 3 { // cold, read, local: b has an entry and a hit
			take("b")
		}
		// Three batches fail: b's view is three intervals old, its hit
		// still to send.
		m.setDown(true)
		time.Sleep(3*iv + iv/2)
		synctest.Wait()
		m.setDown(false)
		for range 3 { // a: a fresh view and a hit
			take("a")
		}
		time.Sleep(iv) // the batch of a and b is on its way
		synctest.Wait()
		done := make(chan error)
		ds := make([]sluice.Decision, 2)
		go func() { done <- s.TakeAll(ctx, []sluice.Request{hourly("a"), hourly("b")}, ds) }()
		synctest.Wait() // the TakeAll waits for b's batch
		close(m.gate)
		if err := <-done; err != nil || !sluice.AllAllowed(ds) {
			t.Fatalf("TakeAll(a, b) = %+v, %v; want both allowed", ds, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, hits := m.snapshot(); hits["a"] != 4 || hits["b"] != 4 {
			t.Errorf("hits counted = %v, want a:4 b:4", hits)
		}
	})
}

// armedShared is memShared whose next Sync call, once armed, waits for
// gate.
type armedShared struct {
	*memShared
	armed atomic.Bool
	gate  chan struct{}
}

func (g *armedShared) Sync(ctx context.Context, ops []redisstore.SyncOp) error {
	if g.armed.CompareAndSwap(true, false) {
		<-g.gate
	}
	return g.memShared.Sync(ctx, ops)
}

// TestSyncFlushDuringBatch: a Flush while the loop's batch is in flight
// must not end the wait of a decision whose view that batch refreshes: it
// would be decided on a view more than two intervals old.
func TestSyncFlushDuringBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 100 * time.Millisecond
		m := &armedShared{memShared: newMemShared(), gate: make(chan struct{})}
		s, err := NewSync(m, SyncOptions{Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1}
		for range 3 { // cold, read, local: an entry with a hit
			r.Now = time.Now()
			if _, err := s.Take(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		m.armed.Store(true)
		time.Sleep(2*iv + iv/2) // the batch at iv is held: the view ages past two intervals
		synctest.Wait()
		flushed := make(chan error)
		go func() { flushed <- s.Flush() }()
		synctest.Wait()
		took := make(chan error)
		go func() {
			r.Now = time.Now()
			_, err := s.Take(ctx, r)
			took <- err
		}()
		synctest.Wait()
		early := false
		select {
		case err := <-took:
			early = true
			t.Errorf("Take returned (%v) before the batch refreshing its view settled: decided on a view %v old", err, 2*iv+iv/2)
		default:
		}
		close(m.gate)
		if !early {
			if err := <-took; err != nil {
				t.Errorf("Take: %v", err)
			}
		}
		if err := <-flushed; err != nil {
			t.Errorf("Flush: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
}

// TestSyncTakeAllFailedBatch: a TakeAll that waited for the batch of a key
// whose view is too old, and saw that batch fail, fails as Take does:
// without one more round trip to read the key from a store that just did
// not answer.
func TestSyncTakeAllFailedBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 100 * time.Millisecond
		m := &gatedShared{memShared: newMemShared(), gate: make(chan struct{})}
		s, err := NewSync(m, SyncOptions{Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		take := allowedTaker(t, s)
		for range 3 { // cold, read, local: b has an entry and a hit
			take("b")
		}
		m.setDown(true)
		time.Sleep(3*iv + iv/2) // three batches fail: b's view is too old
		synctest.Wait()
		m.setDown(false)
		for range 3 { // a: a fresh view and a hit
			take("a")
		}
		time.Sleep(iv) // the batch of a and b is on its way…
		synctest.Wait()
		done := make(chan error)
		ds := make([]sluice.Decision, 2)
		go func() { done <- s.TakeAll(ctx, []sluice.Request{hourly("a"), hourly("b")}, ds) }()
		synctest.Wait() // …the TakeAll waits for it…
		m.setDown(true) // …and it fails
		before, _ := m.snapshot()
		close(m.gate)
		err = <-done
		after, _ := m.snapshot()
		if !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Errorf("TakeAll(a, b) after b's batch failed = %v; want ErrStoreUnavailable", err)
		}
		if calls := after[len(before):]; len(calls) != 1 {
			t.Errorf("store calls from the batch's end to TakeAll's = %v (keys per call); want only the batch's", calls)
		}
	})
}

// hourly is one unit of key's 100/h fixed window, at the bubble's time.
func hourly(key string) sluice.Request {
	return sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: time.Now()}
}

// allowedTaker takes hourly(key) from s, failing t unless it is admitted.
func allowedTaker(t *testing.T, s *Sync) func(key string) {
	return func(key string) {
		t.Helper()
		if d, err := s.Take(context.Background(), hourly(key)); err != nil || !d.Allowed {
			t.Fatalf("Take(%s) = %+v, %v; want allowed", key, d, err)
		}
	}
}
