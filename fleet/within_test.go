package fleet_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestWithinTakerConformance: every decorator, alone and stacked as the
// daemon stacks them, over one Redis (and the Fallback in local mode),
// keeps sluice.WithinTaker's promise: a leaky bucket request whose slot
// leaves past the bound counts nothing, and otherwise TakeWithin decides
// as Take. Sync and Lease pass the leaky bucket through to Redis's
// TakeWithin, as the cache does on a miss; the Fallback to its store's,
// or in local mode to its memory's, at the local share.
func TestWithinTakerConformance(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := openShared(t, []string{srv.Addr}, false)
	for _, st := range decoratorStacks(t, rs) {
		t.Run(st.name, func(t *testing.T) {
			sluicetest.RunWithinTaker(t, func(*testing.T) sluice.Store { return st.s })
		})
	}
}

// plainStore hides every optional method of the store it holds.
type plainStore struct{ s sluice.Store }

func (p plainStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	return p.s.Take(ctx, r)
}

func (p plainStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	return p.s.TakeAll(ctx, rs, ds)
}

// TestWaitNRaceThroughDecorators: two leaky bucket waiters of one key
// through a decorator, each with a deadline (250ms) that the next slot
// (leaving at 200ms) meets and the one after (300ms) does not, both
// answered once before either goes on. Exactly one Wait succeeds, the
// other fails with DeadlineExceeded at once, and the store counts only
// the winner. Through a decorator without TakeWithin, WaitN asked at cost
// 0 and then took: both saw the slot at 200ms, and the loser took the one
// at 300ms, counted and never used.
func TestWaitNRaceThroughDecorators(t *testing.T) {
	for _, dec := range []struct {
		name string
		wrap func(t *testing.T, s sluice.Store) sluice.Store
	}{
		{"OverLimitCache", func(t *testing.T, s sluice.Store) sluice.Store {
			return fleet.NewOverLimitCache(s, fleet.OverLimitOptions{})
		}},
		{"Fallback", func(t *testing.T, s sluice.Store) sluice.Store {
			f := fleet.NewFallback(s, fleet.FallbackOptions{})
			t.Cleanup(f.Close)
			return f
		}},
	} {
		t.Run(dec.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := storetest.NewGated()
				lim, err := sluice.NewLimiter(dec.wrap(t, g), sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for i := range 2 { // slots leaving at 0 and 100ms
					if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
						t.Fatalf("Allow #%d = %+v, %v", i, d, err)
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
						dctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
						defer cancel()
						d, err := lim.Wait(dctx, "k")
						results <- result{d, err, time.Since(start)}
					}()
				}
				var won, lost int
				for range 2 {
					r := <-results
					switch {
					case r.err == nil && r.d.Allowed && r.d.Delay == 200*time.Millisecond && r.after == 200*time.Millisecond:
						won++
					case errors.Is(r.err, context.DeadlineExceeded) && !r.d.Allowed && r.after == 0:
						lost++
					default:
						t.Errorf("Wait with 250ms left = %+v, %v after %v; want admitted with Delay 200ms after 200ms, or refused with DeadlineExceeded at once",
							r.d, r.err, r.after)
					}
				}
				if won != 1 || lost != 1 {
					t.Errorf("of two Waits for one slot in time, %d won and %d lost; want 1 and 1", won, lost)
				}
				if g.Counted() != 3 {
					t.Errorf("the store counted %d requests; want 3 (two Allows, one Wait)", g.Counted())
				}
			})
		})
	}
}

// TestWaitNThroughDecoratorWithoutWithin: over a store without
// TakeWithin, a decorator's TakeWithin answers errors.ErrUnsupported and
// WaitN asks and takes in two steps, as before: a slot leaving past the
// deadline is refused at once with DeadlineExceeded, counting nothing,
// and one in time is taken and waited for.
func TestWaitNThroughDecoratorWithoutWithin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := memstore.New(memstore.Options{})
		f := fleet.NewFallback(fleet.NewOverLimitCache(plainStore{inner}, fleet.OverLimitOptions{}), fleet.FallbackOptions{})
		defer f.Close()
		r := sluice.Request{Key: "k", Algorithm: sluice.LeakyBucket, Limit: sluice.PerSecond(10).WithBurst(20), Cost: 1, Now: time.Now()}
		wt, ok := sluice.Store(f).(sluice.WithinTaker)
		if !ok {
			t.Fatalf("%T does not implement sluice.WithinTaker", f)
		}
		if _, _, err := wt.TakeWithin(context.Background(), r, time.Second); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("TakeWithin over a store without it: %v, want errors.ErrUnsupported", err)
		}
		lim, err := sluice.NewLimiter(f, sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := range 3 { // slots leaving at 0, 100ms and 200ms
			if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("Allow #%d = %+v, %v", i, d, err)
			}
		}
		short, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		if d, err := lim.Wait(short, "k"); !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.RetryAfter != 300*time.Millisecond {
			t.Errorf("Wait with 250ms left for the slot at 300ms = %+v, %v; want refused, RetryAfter 300ms, DeadlineExceeded", d, err)
		}
		long, cancel := context.WithTimeout(ctx, 350*time.Millisecond)
		defer cancel()
		start := time.Now()
		if d, err := lim.Wait(long, "k"); err != nil || !d.Allowed || d.Delay != 300*time.Millisecond || time.Since(start) != 300*time.Millisecond {
			t.Errorf("Wait with 350ms left = %+v, %v after %v; want the slot at 300ms, waited for", d, err, time.Since(start))
		}
	})
}
