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

// TestSyncCloseSendsHitNotYetTouched: a decision that has recorded its hit
// under the key's lock but not yet put the key in the next batch (touch,
// which a Take calls once it has let the key's lock go) when Close runs
// still has its hit in Close's batch: Close looks at every key, not only
// those touched. Before, Close's batch held only the keys touched, and
// Redis counted 2 of the 3 admitted.
func TestSyncCloseSendsHitNotYetTouched(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	s, err := NewSync(rs, SyncOptions{Interval: time.Hour}) // batches only by Flush and Close
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := sluice.Request{Key: fmt.Sprintf("closeuntouched/%d", time.Now().UnixNano()), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0}
	for range 2 { // the first is cold, the second makes the entry: both decided in Redis
		if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take = %+v, %v", d, err)
		}
	}
	if err := s.Flush(); err != nil { // the key is in no batch now
		t.Fatal(err)
	}
	// A Take's local decision, up to its touch.
	tk, err := r.Limit.Ticks()
	if err != nil {
		t.Fatal(err)
	}
	e, decided, err := s.acquire(ctx, &r, tk, nil, nil, nil)
	if err != nil || decided {
		t.Fatalf("acquire = %v, %v; want the key's entry, for a local decision", decided, err)
	}
	var d sluice.Decision
	if err := e.decide(&r, e.now(&r), &e.view, &d); err != nil || !d.Allowed {
		t.Fatalf("decide = %+v, %v", d, err)
	}
	e.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	q := r
	q.Cost = 0
	got, err := rs.Take(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Limit.Rate - got.Remaining; n != 3 {
		t.Errorf("Redis counts %d after 3 admissions and Close, want 3: a hit recorded before Close and not yet touched was not sent", n)
	}
}
