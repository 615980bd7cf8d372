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

// TestSyncCloseSendsChainOfEntries: a key whose rule changed twice since
// the last batch (two routes giving one key two limits) holds three
// entries, each with a hit; each entry numbers its hits only once the one
// it took over from has sent its own (see before), so a chain of three
// needs three batches. Close sent two, returned nil, and the third
// entry's hit was never sent: Redis counted 6 of the 7 admitted. So with
// Redis down at Close: Flush sent one batch.
func TestSyncCloseSendsChainOfEntries(t *testing.T) {
	srv := redistest.StartServer(t)
	direct := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	for _, down := range []bool{false, true} {
		// down: Redis does not answer Close; one Flush once it does sends
		// what Close would have (the daemon flushes until one succeeds).
		gate := redistest.NewGate(t, srv.Addr)
		rs := openRedis(t, redisstore.Options{Addrs: []string{gate.Addr}, Timeout: time.Second})
		s, err := NewSync(rs, SyncOptions{Interval: time.Hour}) // batches only by Close and Flush
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		key := fmt.Sprintf("closechain/%d/%v", time.Now().UnixNano(), down)
		a := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0}
		b := a
		b.Limit = sluice.PerHour(101)
		// a: cold, then the entry's first decision in Redis, then one local;
		// b and a again: a new entry each, decided in Redis first, then one
		// local hit each.
		for _, r := range []sluice.Request{a, a, a, b, b, a, a} {
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("Take = %+v, %v", d, err)
			}
		}
		if st := s.Stats(); st.Local != 3 {
			t.Fatalf("Local = %d, want 3: the test's chain was not built", st.Local)
		}
		if down {
			gate.Shut()
			if err := s.Close(); err == nil {
				t.Fatal("Close with Redis down = nil, want its error")
			}
			gate.Open()
			// The client may first find its cut connection (EOF): wait
			// until it answers again, so that the one Flush below is
			// judged, not the reconnect.
			reconnect(t, rs)
			if err := s.Flush(); err != nil {
				t.Fatalf("Flush after Close: %v", err)
			}
		} else if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		q := a
		q.Cost = 0
		got, err := direct.Take(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if n := a.Limit.Rate - got.Remaining; n != 7 {
			t.Errorf("down=%v: Redis counts %d after 7 admissions and Close, want 7", down, n)
		}
	}
}
