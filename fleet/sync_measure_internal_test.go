package fleet

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// clockedShared is memShared on its own clock, as Redis with RedisTime:
// it decides at its time.Now() (the bubble's), reached half a round trip
// (rtt) after the call, and reports it (Taken.Clock).
type clockedShared struct {
	*memShared
	rtt time.Duration
}

func (c clockedShared) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	time.Sleep(c.rtt / 2)
	r.Now = time.Now()
	d, _, err := c.take(r)
	time.Sleep(c.rtt / 2)
	return d, err
}

func (c clockedShared) SyncTake(ctx context.Context, r sluice.Request) (sluice.Decision, redisstore.Taken, error) {
	time.Sleep(c.rtt / 2)
	r.Now = time.Now()
	d, st, err := c.take(r)
	time.Sleep(c.rtt / 2)
	return d, redisstore.Taken{State: st, Clock: r.Now.UnixMicro()}, err
}

// TestSyncMeasureAfterWait: a key's first read waits for its cold
// decisions in flight before it asks the store; the time that wait took
// is not the clocks' distance. The clocks here are the same: a request
// that waited 100 ms must not move the key's local decisions 100 ms
// ahead, where a bucket has refilled a token the store has not (measured
// from r.Now plus half the call, as before 6f2d58b, it did).
func TestSyncMeasureAfterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt = 100 * time.Millisecond
		st := clockedShared{newMemShared(), rtt}
		s, err := NewSync(st, SyncOptions{Interval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		t0 := time.Now()
		// A token every 100 ms, one at most.
		req := func() sluice.Request {
			return sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(10).WithBurst(1), Cost: 1, Now: time.Now()}
		}
		var wg sync.WaitGroup
		wg.Go(func() { // cold: decided in the store at 50 ms, taking the token
			if d, err := s.Take(ctx, req()); err != nil || !d.Allowed {
				t.Errorf("first request: %+v, %v; want admitted", d, err)
			}
		})
		synctest.Wait() // the first is in the store
		// The second makes the key's entry, waits for the first (100 ms),
		// and is decided in the store at 150 ms: the next token.
		if d, err := s.Take(ctx, req()); err != nil || !d.Allowed {
			t.Fatalf("second request: %+v, %v; want admitted", d, err)
		}
		wg.Wait()
		if now := time.Since(t0); now != 200*time.Millisecond {
			t.Fatalf("at %v, want 200ms", now)
		}
		// At 200 ms, decided locally: the next token comes at 250 ms.
		if d, err := s.Take(ctx, req()); err != nil || d.Allowed {
			t.Errorf("third request, 50 ms before the store has a token again: %+v, %v; want refused", d, err)
		}
	})
}
