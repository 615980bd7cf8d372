package fleet

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncEvictedWhileWaiting replays, step by step, the interleaving the
// batch loop produced under load: a decision finds its key's view two
// intervals old while the key's batch is in flight, and waits for it; the
// batch settles, and the next batch evicts the key (nobody decided on it)
// before the decision looks again. The decision must then read the key
// afresh, not take the new, never-read entry as "refreshed just now" and
// decide on its empty view (a full bucket).
func TestSyncEvictedWhileWaiting(t *testing.T) {
	srv := redistest.StartServer(t)
	st := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	// The loop never fires: the test runs each step itself.
	s, err := NewSync(st, SyncOptions{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	ref := sluicetest.NewReference()
	r := sluice.Request{Key: fmt.Sprintf("evict/%d", time.Now().UnixNano()), Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0}
	both := func(r sluice.Request) (got, want sluice.Decision) {
		t.Helper()
		want, err := ref.Take(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if got, err = s.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
		return got, want
	}
	for i := range 3 {
		r.Now = sluicetest.T0.Add(time.Duration(i) * time.Second)
		if got, want := both(r); got != want {
			t.Fatalf("take %d = %+v, want %+v", i, got, want)
		}
	}
	if err := s.Flush(); err != nil { // the hits reach Redis
		t.Fatal(err)
	}
	s.mu.Lock()
	e := s.keys[keyOf(&r)]
	batch := make(chan struct{})
	s.batch = batch // a batch in flight, with e in it
	s.mu.Unlock()
	e.mu.Lock()
	e.synced = time.Now().Add(-3 * time.Hour) // two intervals old
	e.inflight = true
	e.mu.Unlock()

	r.Now = sluicetest.T0.Add(time.Minute)
	type result struct{ got, want sluice.Decision }
	res := make(chan result, 1)
	go func() {
		got, want := both(r)
		res <- result{got, want}
	}()
	// Wait until the decision has seen e (its time recorded) and let go of
	// it: it waits for the batch.
	for us := r.Now.UnixMicro(); ; runtime.Gosched() {
		e.mu.Lock()
		seen := e.last == us
		e.mu.Unlock()
		if seen {
			break
		}
	}
	// The batch settles (nothing changed in Redis), and the next one evicts
	// e, idle since: then the decision looks again.
	e.mu.Lock()
	e.inflight = false
	e.synced = time.Now()
	e.dead.Store(true)
	e.mu.Unlock()
	s.mu.Lock()
	delete(s.keys, e.key)
	s.mu.Unlock()
	close(batch)
	if x := <-res; x.got != x.want {
		t.Fatalf("take after eviction = %+v, want %+v (the key's 3 hits lost)", x.got, x.want)
	}
}
