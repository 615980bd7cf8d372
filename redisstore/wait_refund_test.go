package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestWaitGoneGivesSlotBack: on a real Redis, a leaky bucket Wait whose
// context ends while it waits out its Delay gives its slot back: the next
// request gets the gone waiter's slot, as on a twin key that never saw
// it (it used to queue a spacing behind a place nobody would leave in).
// The Limiter's clock stands at T0, so both keys decide at one instant.
func TestWaitGoneGivesSlotBack(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	lim, err := sluice.NewLimiter(s, sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(20),
		sluice.WithName(fmt.Sprintf("waitgone%d", time.Now().UnixNano())),
		sluice.WithClock(func() time.Time { return sluicetest.T0 }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"k", "twin"} {
		for i := range 5 { // slots leaving at T0, T0+1s, … T0+4s
			if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
				t.Fatalf("Allow(%s) #%d = %+v, %v", key, i, d, err)
			}
		}
	}
	before, err := lim.AllowN(ctx, "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := lim.Wait(wctx, "k") // its slot leaves at T0+5s: a 5s wait
		done <- err
	}()
	// Until Redis holds the waiter's slot.
	for {
		d, err := lim.AllowN(ctx, "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining < before.Remaining {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Wait returned %v before its slot was seen taken", err)
		default:
			runtime.Gosched()
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait gone = %v, want context.Canceled", err)
	}
	got, err := lim.Allow(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	want, err := lim.Allow(ctx, "twin")
	if err != nil {
		t.Fatal(err)
	}
	if got != want || got.Delay != 5*time.Second {
		t.Errorf("Allow after the gone Wait = %+v; want %+v, Delay 5s (the gone waiter's slot, as the twin key's)", got, want)
	}
}
