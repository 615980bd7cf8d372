package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncOneFlushAfterFailedClose: a key whose batches failed until
// maxDoubts ops are in doubt holds its newer hits back (they wait for the
// ops in doubt to be sent again); Close fails too, Redis down. Once Redis
// answers, one Flush sends it all: the ops in doubt, then in a batch of
// its own the hits that waited for them. Redis counts every admission, so
// that a caller retrying a closed Sync until Flush succeeds (the daemon,
// after a reload) needs no second Flush.
func TestSyncOneFlushAfterFailedClose(t *testing.T) {
	srv := redistest.StartServer(t)
	direct := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	gate := redistest.NewGate(t, srv.Addr)
	rs := openRedis(t, redisstore.Options{Addrs: []string{gate.Addr}, Timeout: time.Second})
	s, err := NewSync(rs, SyncOptions{Interval: time.Hour}) // batches only by Flush and Close
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := fmt.Sprintf("flushonce/%d", time.Now().UnixNano())
	a := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0}
	admitted := 0
	take := func() {
		t.Helper()
		if d, err := s.Take(ctx, a); err != nil || !d.Allowed {
			t.Fatalf("Take = %+v, %v", d, err)
		}
		admitted++
	}
	// Cold, then the entry's first decision in Redis, then one local.
	take()
	take()
	take()
	gate.Shut()
	for i := range maxDoubts {
		take() // local: the view is fresh for two intervals
		if err := s.Flush(); err == nil {
			t.Fatalf("Flush %d with Redis down = nil, want its error", i+1)
		}
	}
	take()
	take()
	s.mu.Lock()
	e := s.keys[keyOf(&a)]
	s.mu.Unlock()
	e.mu.Lock()
	doubts, waiting := len(e.doubts), int64(0)
	for _, h := range e.hits {
		waiting += h.Cost
	}
	e.mu.Unlock()
	if doubts != maxDoubts || waiting != 2 {
		t.Fatalf("before Close: %d ops in doubt and %d hits waiting, want %d and 2: the test's state was not built", doubts, waiting, maxDoubts)
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close with Redis down = nil, want its error")
	}
	gate.Open()
	reconnect(t, rs) // so that the one Flush below is judged, not the reconnect
	before := s.Stats().Batches
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}
	if sent := s.Stats().Batches - before; sent != 2 {
		t.Errorf("the one Flush sent %d batches, want 2 (the ops in doubt, then the hits that waited)", sent)
	}
	q := a
	q.Cost = 0
	got, err := direct.Take(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if n := a.Limit.Rate - got.Remaining; n != int64(admitted) {
		t.Errorf("Redis counts %d after %d admissions and one Flush, want %d", n, admitted, admitted)
	}
}
