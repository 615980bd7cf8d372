package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func newLimiter(t *testing.T, alg sluice.Algorithm, l sluice.Limit) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), alg, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func TestNewLimiterRejectsBadInput(t *testing.T) {
	s := memstore.New(memstore.Options{})
	if _, err := sluice.NewLimiter(s, sluice.GCRA, sluice.Limit{}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("NewLimiter(zero limit) error = %v, want ErrInvalidLimit", err)
	}
	if _, err := sluice.NewLimiter(s, 0, sluice.PerSecond(1)); !errors.Is(err, sluice.ErrUnknownAlgorithm) {
		t.Errorf("NewLimiter(algorithm 0) error = %v, want ErrUnknownAlgorithm", err)
	}
	if _, err := sluice.NewLimiter(nil, sluice.GCRA, sluice.PerSecond(1)); err == nil {
		t.Error("NewLimiter(nil store): no error")
	}
}

func TestLimiterClock(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.FixedWindow, sluice.PerMinute(2), sluice.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		if d, _ := lim.Allow(ctx, "k"); d.Allowed != want {
			t.Fatalf("Allow #%d = %v, want %v", i, d.Allowed, want)
		}
	}
	now = now.Add(time.Minute)
	if d, _ := lim.AllowN(ctx, "k", 2); !d.Allowed {
		t.Fatalf("AllowN(2) in the next window = %+v, want allowed", d)
	}
}

// TestWaitTokenBucket: Wait sleeps RetryAfter and asks again.
func TestWaitTokenBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.TokenBucket, sluice.PerSecond(2).WithBurst(1))
		ctx := context.Background()
		start := time.Now()
		for i := range 5 {
			if _, err := lim.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			// Fake time starts on a whole second; 1/2 s spacing after the first.
			if got, want := time.Since(start), time.Duration(i)*500*time.Millisecond; got != want {
				t.Fatalf("Wait #%d returned after %v, want %v", i, got, want)
			}
		}
	})
}

// TestWaitLeakyBucketShapes: concurrent waiters leave evenly spaced.
func TestWaitLeakyBucketShapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
		ctx := context.Background()
		start := time.Now()
		var mu sync.Mutex
		var done []time.Duration
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := lim.Wait(ctx, "k"); err != nil {
					t.Error(err)
				}
				mu.Lock()
				done = append(done, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		seen := map[time.Duration]bool{}
		for _, d := range done {
			if d%(100*time.Millisecond) != 0 || d > 700*time.Millisecond {
				t.Fatalf("a waiter left at %v: want multiples of 100ms up to 700ms", d)
			}
			seen[d] = true
		}
		if len(seen) != 8 {
			t.Fatalf("waiters left at %v: want 8 distinct 100ms slots", done)
		}
	})
}

// TestWaitCancelled: a Wait ends when its context is cancelled mid-wait.
// (A deadline it cannot meet ends it at once: TestWaitPastDeadlineReturnsAtOnce.)
func TestWaitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, sluice.FixedWindow, sluice.PerMinute(1))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := lim.Wait(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(5*time.Second, cancel)
		start := time.Now()
		_, err := lim.Wait(ctx, "k")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait cancelled mid-wait = %v, want Canceled", err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Fatalf("Wait gave up after %v, want 5s (when the context was cancelled)", got)
		}
	})
}

func TestWaitNever(t *testing.T) {
	lim := newLimiter(t, sluice.GCRA, sluice.PerSecond(5))
	if _, err := lim.WaitN(context.Background(), "k", 6); !errors.Is(err, sluice.ErrNeverAllowed) {
		t.Fatalf("WaitN(6) on 5/s = %v, want ErrNeverAllowed", err)
	}
}

func ExampleLimiter() {
	store := memstore.New(memstore.Options{})
	lim, _ := sluice.NewLimiter(store, sluice.SlidingWindowCounter, sluice.PerMinute(3))
	ctx := context.Background()
	t0 := time.Unix(1_700_000_040, 0) // a minute boundary
	for i := range 4 {
		d, _ := lim.AllowAt(ctx, "user:42", t0, 1)
		fmt.Printf("#%d allowed=%v remaining=%d retry=%v\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// #0 allowed=true remaining=2 retry=0s
	// #1 allowed=true remaining=1 retry=0s
	// #2 allowed=true remaining=0 retry=0s
	// #3 allowed=false remaining=0 retry=1m0.000001s
}

// TestLimiterReport: a report past the limit is counted as debt: the key
// is refused until it has drained at the rate.
func TestLimiterReport(t *testing.T) {
	now := time.Unix(1_700_006_400, 0)
	clock := func() time.Time { return now }
	lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.TokenBucket, sluice.PerSecond(10), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := lim.Report(ctx, "llm", 25)
	if err != nil || d.Allowed || d.RetryAfter != 1600*time.Millisecond {
		t.Fatalf("Report(25) against 10/s = %+v, %v; want counted, not allowed, RetryAfter 1.6s", d, err)
	}
	now = now.Add(1599 * time.Millisecond)
	if d, _ := lim.Allow(ctx, "llm"); d.Allowed {
		t.Fatalf("Allow 1.599s after a report of 25 against 10/s: admitted, want refused")
	}
	now = now.Add(time.Millisecond)
	if d, _ := lim.Allow(ctx, "llm"); !d.Allowed {
		t.Fatalf("Allow 1.6s after a report of 25 against 10/s: %+v, want admitted", d)
	}
	if _, err := lim.Report(ctx, "llm", -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("Report(-1) = %v, want ErrInvalidCost", err)
	}
}

// TestWaitDoneContextCountsNothing: Wait with a context already ended
// returns its error and takes nothing, as x/time/rate's WaitN: a leaky
// bucket slot was taken (and never given back) for a wait reported failed,
// and a token for a call that could not have waited.
func TestWaitDoneContextCountsNothing(t *testing.T) {
	for _, alg := range sluice.Algorithms() {
		lim := newLimiter(t, alg, sluice.PerSecond(2))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for i := range 3 {
			if _, err := lim.Wait(ctx, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Wait #%d with a cancelled context = %v, want context.Canceled", alg, i, err)
			}
		}
		if d, err := lim.Allow(context.Background(), "k"); err != nil || !d.Allowed || d.Delay != 0 || alg != sluice.LeakyBucket && d.Remaining != 1 {
			t.Errorf("%s: Allow after the cancelled Waits = %+v, %v; want the first request's decision (allowed, no delay, Remaining 1)", alg, d, err)
		}
	}
}
