package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestWaitGoneGivesSlotBack (plainStore, keytaker_test.go, hides Refunder too): a leaky bucket Wait whose context ends while
// it waits out its Delay gives its slot back on a store with Refunder: the
// next request gets the gone waiter's slot, as on a twin key that never
// saw it. It used to keep the slot, so the next request left a spacing
// later, behind a place nobody would leave in. On a store without
// Refunder the slot stays taken, as before.
func TestWaitGoneGivesSlotBack(t *testing.T) {
	for _, c := range []struct {
		name   string
		store  func() sluice.Store
		after  time.Duration // how long the waiter waits before it goes
		refund bool
	}{
		{"memstore gone at once", func() sluice.Store { return memstore.New(memstore.Options{}) }, 0, true},
		{"memstore gone after 250ms", func() sluice.Store { return memstore.New(memstore.Options{}) }, 250 * time.Millisecond, true},
		{"no Refunder", func() sluice.Store { return plainStore{memstore.New(memstore.Options{})} }, 250 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim, err := sluice.NewLimiter(c.store(), sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for _, key := range []string{"k", "twin"} {
					for i := range 5 { // slots leaving at 0, 100ms, … 400ms
						if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
							t.Fatalf("%s: Allow(%s) #%d = %+v, %v", c.name, key, i, d, err)
						}
					}
				}
				wctx, cancel := context.WithCancel(ctx)
				done := make(chan error)
				go func() {
					_, err := lim.Wait(wctx, "k") // its slot leaves at 500ms
					done <- err
				}()
				time.Sleep(c.after)
				synctest.Wait() // the waiter holds its slot, asleep
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("%s: Wait gone after %v = %v, want context.Canceled", c.name, c.after, err)
				}
				got, err := lim.Allow(ctx, "k")
				if err != nil || !got.Allowed {
					t.Fatalf("%s: Allow after the gone Wait = %+v, %v", c.name, got, err)
				}
				want, err := lim.Allow(ctx, "twin")
				if err != nil {
					t.Fatal(err)
				}
				if !c.refund {
					// Behind the gone waiter's place, a spacing later.
					want.Delay += 100 * time.Millisecond
					want.ResetAfter += 100 * time.Millisecond
					want.Remaining--
				}
				if got != want {
					t.Errorf("%s: Allow after the gone Wait = %+v; want %+v (the twin key that never waited, %s)", c.name, got, want,
						map[bool]string{true: "the slot given back", false: "less the slot kept"}[c.refund])
				}
				if c.refund && got.Delay != 500*time.Millisecond-c.after {
					t.Errorf("%s: next request's Delay %v, want %v: the gone waiter's slot, at 500ms", c.name, got.Delay, 500*time.Millisecond-c.after)
				}
			})
		})
	}
}

// TestWaitGoneAfterSlotLeftKeepsIt: a Wait that sees its context end only
// once its slot's time has come by the Limiter's clock (its goroutine
// scheduled late) gives nothing back: the request is counted and may
// proceed, as when its timer and the context end at once.
func TestWaitGoneAfterSlotLeftKeepsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var skew time.Duration // how far the Limiter's clock runs ahead of the timers
		lim, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20),
			sluice.WithClock(func() time.Time { return time.Now().Add(skew) }))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, key := range []string{"k", "twin"} {
			for i := range 5 {
				if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
					t.Fatalf("Allow(%s) #%d = %+v, %v", key, i, d, err)
				}
			}
		}
		wctx, cancel := context.WithCancel(ctx)
		type result struct {
			d   sluice.Decision
			err error
		}
		done := make(chan result)
		go func() {
			d, err := lim.Wait(wctx, "k") // its slot leaves at 500ms
			done <- result{d, err}
		}()
		synctest.Wait()
		skew = 500 * time.Millisecond // by the Limiter's clock, the slot has left
		cancel()
		if r := <-done; r.err != nil || !r.d.Allowed {
			t.Fatalf("Wait gone after its slot left = %+v, %v; want admitted, no error", r.d, r.err)
		}
		if d, err := lim.Allow(ctx, "twin"); err != nil || !d.Allowed { // the twin takes the same slot
			t.Fatalf("Allow(twin) = %+v, %v", d, err)
		}
		got, _ := lim.AllowN(ctx, "k", 0)
		want, _ := lim.AllowN(ctx, "twin", 0)
		if got != want {
			t.Errorf("after the Wait whose slot left: AllowN(0) = %+v, want %+v (its slot kept, as the twin's)", got, want)
		}
	})
}

// raceStore is a store of one's own with Refunder and without
// WithinTaker: after answering its first request of cost 0 (WaitN's
// question, how long the queue is), another request of the key takes
// the slot the answer saw.
type raceStore struct {
	s     *memstore.Store
	raced bool
}

func (r *raceStore) Take(ctx context.Context, q sluice.Request) (sluice.Decision, error) {
	d, err := r.s.Take(ctx, q)
	if q.Cost == 0 && !r.raced {
		r.raced = true
		q.Cost = 1
		if _, err := r.s.Take(ctx, q); err != nil {
			return d, err
		}
	}
	return d, err
}

func (r *raceStore) TakeAll(ctx context.Context, qs []sluice.Request, ds []sluice.Decision) error {
	return r.s.TakeAll(ctx, qs, ds)
}

func (r *raceStore) Refund(ctx context.Context, q sluice.Request) (sluice.Decision, error) {
	return r.s.Refund(ctx, q)
}

// TestWaitLateSlotGivenBack: on a store without WithinTaker, a Wait whose
// slot another request took between its question and its take, and whose
// own slot so leaves past its deadline, fails at once and gives the slot
// back on a store with Refunder: the key then decides as a twin that saw
// only the other request. It used to keep the slot.
func TestWaitLateSlotGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := sluice.NewLimiter(&raceStore{s: memstore.New(memstore.Options{})}, sluice.LeakyBucket, sluice.PerSecond(10).WithBurst(20))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, key := range []string{"k", "twin"} {
			for i := range 5 { // slots leaving at 0, 100ms, … 400ms
				if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
					t.Fatalf("Allow(%s) #%d = %+v, %v", key, i, d, err)
				}
			}
		}
		if d, err := lim.Allow(ctx, "twin"); err != nil || !d.Allowed { // the other request's slot, at 500ms
			t.Fatalf("Allow(twin) = %+v, %v", d, err)
		}
		dctx, cancel := context.WithTimeout(ctx, 550*time.Millisecond)
		defer cancel()
		if d, err := lim.Wait(dctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait whose slot was taken under it = %+v, %v; want DeadlineExceeded", d, err)
		}
		got, _ := lim.AllowN(ctx, "k", 0)
		want, _ := lim.AllowN(ctx, "twin", 0)
		if got != want {
			t.Errorf("after the late Wait: AllowN(0) = %+v; want %+v (the twin that saw only the other request)", got, want)
		}
	})
}
