package sluice_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storetest"
)

// TestWaitNStoreLatency: a leaky bucket Wait whose slot leaves before its
// deadline, on a store whose answers take 20ms to come back once it has
// decided (as Redis's do), is admitted when the slot leaves: the Delay
// counts from the decision, not from the answer's arrival. Through
// WithinTaker it used to wait the Delay from the answer, 20ms past the
// slot and past the deadline, and fail with the slot counted; through the
// question and the take, to call the slot it took late, and fail.
func TestWaitNStoreLatency(t *testing.T) {
	const rtt = 20 * time.Millisecond
	for _, c := range []struct {
		name  string
		store func(*storetest.RoundTrip) sluice.Store
	}{
		{"WithinTaker", func(s *storetest.RoundTrip) sluice.Store { return s.WithWithin() }},
		{"question and take", func(s *storetest.RoundTrip) sluice.Store { return s }},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slow := storetest.NewRoundTrip()
				lim, err := sluice.NewLimiter(c.store(slow), sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for i := range 3 { // slots leaving at 0, 100ms and 200ms
					if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
						t.Fatalf("Allow #%d = %+v, %v", i, d, err)
					}
				}
				time.Sleep(60 * time.Millisecond)
				slow.SetRTT(rtt)
				// The next slot leaves 240ms from now, 10ms before the
				// deadline.
				start := time.Now()
				dctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
				defer cancel()
				d, err := lim.Wait(dctx, "k")
				if after := time.Since(start); err != nil || !d.Allowed || after != 240*time.Millisecond {
					t.Errorf("Wait with 250ms left for a slot leaving in 240ms, answers taking %v = %+v, %v after %v; want admitted after 240ms", rtt, d, err, after)
				}
			})
		})
	}
}
