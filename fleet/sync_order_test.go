package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncSuccessorOrder: a key's entry is let go (Forget, or a changed
// rule) while its hits are in doubt: a batch failed before Redis ran it.
// The key's next entry numbers its own hits after them, for the same
// writer; Redis skips an op numbered below one it added, so the next
// entry's op must not reach Redis first, or the old hits are never
// counted. Here the new entry's op is sent first by a load (its view aged
// two intervals) after a second failed batch; every admitted request must
// be counted in the end.
func TestSyncSuccessorOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		// next lets the key's entry go and returns the request of the
		// next entry.
		next func(t *testing.T, s *fleet.Sync, r sluice.Request) sluice.Request
	}{
		{"forget", func(t *testing.T, s *fleet.Sync, r sluice.Request) sluice.Request {
			if err := s.Forget(func(_, key string) bool { return key == r.Key }); err == nil {
				t.Fatal("Forget with the gate shut succeeded")
			}
			return r
		}},
		{"rule changed", func(t *testing.T, s *fleet.Sync, r sluice.Request) sluice.Request {
			if err := s.Flush(); err == nil {
				t.Fatal("Flush with the gate shut succeeded")
			}
			r.Limit.Rate-- // the same window: the state carries over
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			gate := redistest.NewGate(t, srv.Addr)
			// fleet.OpenRedis's generous timeout: the calls made with the
			// gate open must succeed, and a shut gate fails calls at once.
			rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{gate.Addr}})
			s := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour}) // batches only when flushed
			ctx := context.Background()
			admitted := 0
			take := func(r sluice.Request, n int) {
				t.Helper()
				for i := range n {
					if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
						t.Fatalf("Take %d = %+v, %v; want allowed", i, d, err)
					}
					admitted++
				}
			}
			r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1000), Cost: 1,
				Now: sluicetest.T0.Add(10 * time.Minute)}
			take(r, 5) // cold, the entry's first read, 3 local hits
			gate.Shut()
			r = tc.next(t, s, r) // the 3 hits: an op in doubt, not run
			gate.Open()
			fleet.Reconnect(t, rs)
			take(r, 5) // the next entry: (cold,) first read, local hits
			gate.Shut()
			if err := s.Flush(); err == nil {
				t.Fatal("second Flush with the gate shut succeeded")
			}
			gate.Open()
			fleet.Reconnect(t, rs)
			s.Age(2 * time.Hour)
			take(r, 1) // the next entry's load
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			store := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
			if got := countedIn(t, store, r); got != int64(admitted) {
				t.Errorf("Redis counts %d requests, want the %d admitted", got, admitted)
			}
		})
	}
}
