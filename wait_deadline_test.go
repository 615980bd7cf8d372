package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// TestWaitPastDeadlineReturnsAtOnce: a Wait whose context's deadline comes
// before the request could be admitted returns at once, as x/time/rate's
// WaitN ("would exceed context deadline"), with an error wrapping
// context.DeadlineExceeded, and counts nothing: the key then decides as a
// twin key that never saw the Wait. It used to sleep until the deadline
// first.
func TestWaitPastDeadlineReturnsAtOnce(t *testing.T) {
	for _, alg := range sluice.Algorithms() {
		synctest.Test(t, func(t *testing.T) {
			lim := newLimiter(t, alg, sluice.PerSecond(2))
			ctx := context.Background()
			// Fill both keys until a request is refused.
			for _, key := range []string{"k", "twin"} {
				for i := 0; ; i++ {
					d, err := lim.Allow(ctx, key)
					if err != nil || i > 10 {
						t.Fatalf("%s: Allow #%d = %+v, %v", alg, i, d, err)
					}
					if !d.Allowed {
						if d.RetryAfter <= 100*time.Millisecond {
							t.Fatalf("%s: RetryAfter %v, want more than the 100ms deadline", alg, d.RetryAfter)
						}
						break
					}
				}
			}
			dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			d, err := lim.Wait(dctx, "k")
			if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
				t.Fatalf("%s: Wait with a 100ms deadline = %+v, %v; want refused, DeadlineExceeded", alg, d, err)
			}
			if got := time.Since(start); got != 0 {
				t.Fatalf("%s: Wait with a deadline it cannot meet returned after %v, want at once", alg, got)
			}
			got, _ := lim.AllowN(ctx, "k", 0)
			want, _ := lim.AllowN(ctx, "twin", 0)
			if got != want {
				t.Fatalf("%s: after the failed Wait, AllowN(0) = %+v; the twin key that never waited: %+v", alg, got, want)
			}
		})
	}
}

// TestWaitLeakyBucketPastDeadline: a leaky bucket Wait whose slot would
// leave after the context's deadline returns at once and takes no slot
// (it used to take the slot, sleep until the deadline and fail, pushing
// every later request one slot further out); one whose slot leaves before
// the deadline waits its Delay and succeeds.
func TestWaitLeakyBucketPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
		ctx := context.Background()
		for i := range 10 { // slots leaving at 0, 100ms, … 900ms
			if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("Allow #%d = %+v, %v", i, d, err)
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := lim.Wait(dctx, "k")
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Fatalf("Wait for a slot leaving at 1s with a 500ms deadline = %+v, %v; want refused, DeadlineExceeded", d, err)
		}
		if got := time.Since(start); got != 0 {
			t.Fatalf("Wait returned after %v, want at once", got)
		}
		if d, _ := lim.AllowN(ctx, "k", 0); d.ResetAfter != time.Second {
			t.Fatalf("after the failed Wait, the queue's next slot leaves after %v, want 1s (nothing taken)", d.ResetAfter)
		}
		dctx, cancel = context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		if d, err := lim.Wait(dctx, "k"); err != nil || !d.Allowed || d.Delay != time.Second {
			t.Fatalf("Wait with a 1.5s deadline = %+v, %v; want admitted with Delay 1s", d, err)
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("Wait with a 1.5s deadline returned after %v, want 1s", got)
		}
	})
}

// TestWaitWithinDeadline: a RetryAfter shorter than the time left is
// waited out as before.
func TestWaitWithinDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.GCRA, sluice.PerSecond(2).WithBurst(1))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		for i := range 3 {
			if _, err := lim.Wait(ctx, "k"); err != nil {
				t.Fatalf("Wait #%d = %v", i, err)
			}
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("three Waits at 2/s returned after %v, want 1s", got)
		}
	})
}

// TestWaitNLeakyBucketCostPastDeadline: a leaky bucket request of cost n
// leaves with its last unit, n-1 spacings after its first. A WaitN whose
// first unit would leave before the deadline but whose last would not
// returns at once and takes no slot, as one whose first unit is late
// does.
func TestWaitNLeakyBucketCostPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(5))
		ctx := context.Background()
		dctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		// On an idle queue, units leaving at 0, 1s and 2s.
		start := time.Now()
		d, err := lim.WaitN(dctx, "k", 3)
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Fatalf("WaitN(3) leaving at 2s with a 1.5s deadline = %+v, %v; want refused, DeadlineExceeded", d, err)
		}
		if got := time.Since(start); got != 0 {
			t.Fatalf("WaitN returned after %v, want at once", got)
		}
		if d, _ := lim.AllowN(ctx, "k", 1); !d.Allowed || d.Delay != 0 {
			t.Fatalf("after the failed WaitN, a request = %+v; want admitted with no delay (nothing taken)", d)
		}
	})
}
