package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// liveHeap is the heap in use once the collector has run.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestSweepHandsMemoryBack: after a flood of keys that all come to rest,
// Sweep hands back their memory, not only their entries. The table's cells
// and the log map only grew: 200,000 swept keys left 7–8 MB held with
// Len() 0 (half of what they took), as 4 Mi keys would leave 250 MB.
func TestSweepHandsMemoryBack(t *testing.T) {
	ctx := context.Background()
	const n = 200_000
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindowLog} {
		for _, shards := range []int{1, 0} {
			t.Run(fmt.Sprintf("%v/shards=%d", alg, shards), func(t *testing.T) {
				s := memstore.New(memstore.Options{Shards: shards})
				before := liveHeap()
				// Every 100th key lasts an hour; the others rest after 1 s.
				for i := range n {
					l := sluice.PerSecond(5)
					if i%100 == 0 {
						l = sluice.PerHour(5)
					}
					if _, err := s.Take(ctx, sluice.Request{Key: fmt.Sprintf("key-%012d", i), Algorithm: alg, Limit: l, Cost: 1, Now: sluicetest.T0}); err != nil {
						t.Fatal(err)
					}
				}
				filled := liveHeap() - before
				if got := s.Sweep(sluicetest.T0.Add(2 * time.Second)); got != n-n/100 {
					t.Fatalf("Sweep(+2s) deleted %d keys, want %d", got, n-n/100)
				}
				held := liveHeap() - before
				if s.Len() != n/100 {
					t.Fatalf("Len() after Sweep = %d, want %d", s.Len(), n/100)
				}
				// The 1% kept may take a few times their share; half of
				// the whole stayed before.
				if held*10 > filled {
					t.Errorf("after sweeping 99%% of %d keys the store holds %d of the %d bytes they took; want at most a tenth", n, held, filled)
				}
				// The kept keys still count.
				d, err := s.Take(ctx, sluice.Request{Key: fmt.Sprintf("key-%012d", 0), Algorithm: alg, Limit: sluice.PerHour(5), Cost: 0, Now: sluicetest.T0.Add(2 * time.Second)})
				if err != nil || d.Remaining != 4 {
					t.Errorf("a kept key after Sweep: %+v, %v; want Remaining 4", d, err)
				}
				runtime.KeepAlive(s)
			})
		}
	}
}
