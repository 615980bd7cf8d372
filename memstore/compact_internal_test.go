package memstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSweepsCompactSparseSets: the incremental sweep (every 16th new key,
// and every new key at the cap) hands back the room of keys deleted, as
// Sweep does. A log map or table left holding a few keys in room for
// thousands (deleted by Reset, or swept) made every such sweep walk all
// that room for its few keys: 16 µs per new key at the cap instead of 0.6.
func TestSweepsCompactSparseSets(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.SlidingWindowLog, sluice.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			s := New(Options{Shards: 1, MaxKeys: 1 << 15})
			req := func(key string) sluice.Request {
				return sluice.Request{Key: key, Algorithm: alg, Limit: sluice.PerHour(5), Cost: 1, Now: sluicetest.T0}
			}
			const n = 16_000
			for i := range n {
				if _, err := s.Take(ctx, req(fmt.Sprint("flood", i))); err != nil {
					t.Fatal(err)
				}
			}
			for i := 1; i < n; i++ {
				s.Reset(ctx, req(fmt.Sprint("flood", i)))
			}
			for i := range 16 { // one incremental sweep
				if _, err := s.Take(ctx, req(fmt.Sprint("new", i))); err != nil {
					t.Fatal(err)
				}
			}
			sh := &s.shards[0]
			if got := s.Len(); got != 17 {
				t.Fatalf("Len() = %d, want 17", got)
			}
			if sh.logsPeak > 64 || len(sh.small.slots) > 64 {
				t.Errorf("after 16 new keys the log map has room for %d keys and the table %d cells, for %d keys; want both at most 64", sh.logsPeak, len(sh.small.slots), s.Len())
			}
			d, err := s.Take(ctx, sluice.Request{Key: "flood0", Algorithm: alg, Limit: sluice.PerHour(5), Cost: 0, Now: sluicetest.T0})
			if err != nil || d.Remaining != 4 {
				t.Errorf("the key kept: %+v, %v; want Remaining 4", d, err)
			}
		})
	}
}
