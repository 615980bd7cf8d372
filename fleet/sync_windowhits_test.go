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

// TestSyncWindowHitsBounded: a window key decided in many windows between
// two batches (sync: 1m on a 10ms window) keeps the hits of its last
// window (the fixed window) or last two (the counter) only, since the
// older ones cannot change what the batch leaves in Redis: one hit per
// window, kept until the batch, was up to 6,000 hits a key. The batch
// still leaves exactly the state a single store reaches.
func TestSyncWindowHitsBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	limit := sluice.Limit{Rate: 100, Period: 10 * time.Millisecond}
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			s, err := NewSync(rs, SyncOptions{Interval: time.Hour}) // batches by Flush only
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ref := sluicetest.NewReference()
			key := fmt.Sprintf("windowhits/%d/%s", time.Now().UnixNano(), alg)
			const windows = 1000
			for i := range windows * 3 { // three requests a window
				r := sluice.Request{Key: key, Algorithm: alg, Limit: limit, Cost: 1, Now: sluicetest.T0.Add(time.Duration(i) * 10 * time.Millisecond / 3)}
				want, err := ref.Take(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Take(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed != want.Allowed {
					t.Fatalf("request %d: allowed %v, want %v", i, got.Allowed, want.Allowed)
				}
			}
			s.mu.Lock()
			e := s.keys[nsKey{key: key}]
			s.mu.Unlock()
			e.mu.Lock()
			n := len(e.hits)
			e.mu.Unlock()
			if n > 2 {
				t.Errorf("after %d windows without a batch: %d hits kept, want at most 2 (the last two windows)", windows, n)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			// Redis' state is the reference's: a cost-0 request at the
			// last instant says the same in both.
			r := sluice.Request{Key: key, Algorithm: alg, Limit: limit, Now: sluicetest.T0.Add((windows*3 - 1) * 10 * time.Millisecond / 3)}
			want, err := ref.Take(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rs.Take(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if got.Remaining != want.Remaining {
				t.Errorf("Redis after the batch: remaining %d, want %d (the reference's)", got.Remaining, want.Remaining)
			}
		})
	}
}
