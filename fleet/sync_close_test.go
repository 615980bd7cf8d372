package fleet_test

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

// TestSyncFlushAfterFailedClose: a Close whose last batch cannot reach
// Redis returns its error and keeps the hits it could not send; a Flush
// once Redis answers sends them, each once.
func TestSyncFlushAfterFailedClose(t *testing.T) {
	srv := redistest.StartServer(t)
	gate := redistest.NewGate(t, srv.Addr)
	// OpenRedis's generous timeout: the shut gate fails calls at once, and
	// those made while it is open must not fail on a loaded machine.
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{gate.Addr}})
	s, err := fleet.NewSync(rs, fleet.SyncOptions{Interval: time.Hour}) // batches only by Flush and Close
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := sluice.Request{Key: fmt.Sprintf("close/%d", time.Now().UnixNano()), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0}
	for range 5 { // two decided in Redis (cold, then the entry's read), three locally
		if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take: %+v, %v", d, err)
		}
	}
	direct := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}}) // not through the gate
	count := func() int64 {
		q := r
		q.Cost = 0
		d, err := direct.Take(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return 100 - d.Remaining
	}
	if got := count(); got != 2 {
		t.Fatalf("Redis counts %d before Close, want 2", got)
	}
	gate.Shut()
	if err := s.Close(); err == nil {
		t.Fatal("Close with Redis cut off: no error")
	}
	gate.Open()
	// The client may first find its connection cut (EOF): wait until it
	// answers again, so that the first Flush below is judged, not the
	// reconnect (ten tries, as before, bound nothing in time).
	fleet.Reconnect(t, rs)
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush once Redis answers: %v", err)
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush again: %v", err)
	}
	if got := count(); got != 5 {
		t.Errorf("Redis counts %d after the Flush, want the 5 admitted", got)
	}
}
