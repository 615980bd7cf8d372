package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLeaseWindowBoundary: three Lease instances asked in turn at 1.5× a
// limit of 100 a second, over six windows: the units an instance holds at
// a window's end are not spent in the next, so no window admits more than
// 100, and every window but the first reaches 90 (the units left over
// expire, and are given back with the next grant).
func TestLeaseWindowBoundary(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	for _, c := range []struct {
		alg   sluice.Algorithm
		chunk int64
	}{{sluice.FixedWindow, 0}, {sluice.FixedWindow, 30}, {sluice.SlidingWindowCounter, 0}} {
		t.Run(fmt.Sprintf("%v/chunk=%d", c.alg, c.chunk), func(t *testing.T) {
			var ls []*fleet.Lease
			for range 3 {
				ls = append(ls, newLease(t, openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: c.chunk}))
			}
			key := fmt.Sprintf("leasewin/%d/%v/%d", time.Now().UnixNano(), c.alg, c.chunk)
			const windows, perWindow = 6, 150
			admitted := make([]int, windows)
			start := sluicetest.T0.Truncate(time.Second).Add(time.Second / 3) // mid-window: the first is short
			for i := range windows * perWindow {
				now := start.Add(time.Duration(i) * time.Second / perWindow)
				d, err := ls[i%3].Take(ctx, sluice.Request{Key: key, Algorithm: c.alg, Limit: sluice.PerSecond(100), Cost: 1, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				if w := int(now.Sub(start.Truncate(time.Second)) / time.Second); d.Allowed && w < windows {
					admitted[w]++
				}
			}
			t.Logf("admitted per window: %v", admitted)
			for w, n := range admitted {
				if n > 100 {
					t.Errorf("window %d admitted %d, over the limit of 100", w, n)
				}
				if c.alg == sluice.FixedWindow && w > 0 && w < windows-1 && n < 90 {
					t.Errorf("window %d admitted %d, want at least 90", w, n)
				}
			}
		})
	}
}
