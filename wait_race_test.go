package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// // TestWaitNRaceTakesNoLateSlot: two waiters of one key, each with a
// deadline that one admission meets and the next does not, both answered
// once before either goes on. Exactly one Wait succeeds, when its
// admission (and, for the leaky bucket, its slot) comes; the other fails
// with DeadlineExceeded, at once for the leaky bucket (its slot would
// leave too late) and after one RetryAfter for the buckets (asked again,
// it would be admitted too late), having counted nothing: the key then
// decides as if only the winner had waited. The leaky bucket used to let
// both take: asked at cost 0, both saw the slot leaving at 200ms, and the
// loser then took the one leaving at 300ms, past its deadline, which it
// never used and later requests queued behind.
func TestWaitNRaceTakesNoLateSlot(t *testing.T) {
	for _, tc := range []struct {
		alg        sluice.Algorithm
		limit      sluice.Limit
		left       time.Duration // each waiter's deadline, from the start
		won, lost  time.Duration // when the winner returns, and the loser
		delay      time.Duration // the winner's Delay
		resetAfter time.Duration // then, at cost 0
	}{
		// Slots leaving at 0 and 100ms: the next at 200ms, then 300ms.
		{sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20), 250 * time.Millisecond, 200 * time.Millisecond, 0, 200 * time.Millisecond, 100 * time.Millisecond},
		// Two tokens taken: the next at 100ms, then 200ms.
		{sluice.TokenBucket, sluice.PerSecond(10).WithBurst(2), 150 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 0, 200 * time.Millisecond},
		{sluice.GCRA, sluice.PerSecond(10).WithBurst(2), 150 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, 0, 200 * time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			g := storetest.NewGated()
			lim, err := sluice.NewLimiter(g, tc.alg, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 2 {
				if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
					t.Fatalf("%s: Allow #%d = %+v, %v", tc.alg, i, d, err)
				}
			}
			g.Arm(2)
			start := time.Now()
			type result struct {
				d     sluice.Decision
				err   error
				after time.Duration
			}
			results := make(chan result, 2)
			for range 2 {
				go func() {
					dctx, cancel := context.WithTimeout(ctx, tc.left)
					defer cancel()
					d, err := lim.Wait(dctx, "k")
					results <- result{d, err, time.Since(start)}
				}()
			}
			var won, lost int
			for range 2 {
				r := <-results
				switch {
				case r.err == nil && r.d.Allowed && r.d.Delay == tc.delay && r.after == tc.won:
					won++
				case errors.Is(r.err, context.DeadlineExceeded) && !r.d.Allowed && r.after == tc.lost:
					lost++
				default:
					t.Errorf("%s: Wait with %v left = %+v, %v after %v; want admitted with Delay %v after %v, or refused with DeadlineExceeded after %v",
						tc.alg, tc.left, r.d, r.err, r.after, tc.delay, tc.won, tc.lost)
				}
			}
			if won != 1 || lost != 1 {
				t.Errorf("%s: of two Waits for one admission in time, %d won and %d lost; want 1 and 1", tc.alg, won, lost)
			}
			if g.Counted() != 3 {
				t.Errorf("%s: the store counted %d requests; want 3 (two Allows, one Wait)", tc.alg, g.Counted())
			}
			if d, _ := lim.AllowN(ctx, "k", 0); d.ResetAfter != tc.resetAfter {
				t.Errorf("%s: after the Waits (at %v), AllowN(0).ResetAfter = %v; want %v (only the winner counted)", tc.alg, time.Since(start), d.ResetAfter, tc.resetAfter)
			}
		})
	}
}

// TestWaitNBoundedAllocatesNothing: a leaky bucket Wait under a deadline
// shorter than its queue (the one-step take, TakeWithin) allocates nothing
// when its slot leaves at once.
func TestWaitNBoundedAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	synctest.Test(t, func(t *testing.T) {
		now := sluicetest.T0
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20),
			sluice.WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		// The queue lasts up to 2s, longer than the 1s left: the bounded take.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(100 * time.Millisecond) // one spacing: the slot leaves at once
			if d, err := lim.Wait(ctx, "k"); err != nil || !d.Allowed || d.Delay != 0 {
				t.Fatalf("Wait = %+v, %v; want admitted at once", d, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v allocations per bounded Wait, want 0", allocs)
		}
	})
}
