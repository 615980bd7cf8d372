package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestFlatBatch holds one Take in flight (Redis paused for writes), queues
// more behind it on two keys, then lets them go: they run as one batch
// script call, and each key admits exactly what the reference admits for
// the same requests, for every algorithm with a flat script, with the
// request's clock and with Redis'.
func TestFlatBatch(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := adminClient(t, srv.Addr)
	ctx := context.Background()
	for _, redisTime := range []bool{false, true} {
		s, err := New(ctx, Options{Addrs: []string{srv.Addr}, Timeout: 10 * time.Second, RedisTime: redisTime})
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range sluice.Algorithms() {
			if s.flatBatch[alg] == nil {
				continue
			}
			name := fmt.Sprintf("%v/redisTime=%v", alg, redisTime)
			l := sluice.PerHour(10).WithBurst(10)
			if alg == sluice.LeakyBucket {
				l = sluice.PerHour(10).WithBurst(6)
			}
			reqFor := func(i int) sluice.Request {
				return sluice.Request{Key: fmt.Sprintf("batch/%s/%d", name, i%2), Algorithm: alg, Limit: l, Cost: 1, Now: sluicetest.T0}
			}
			if err := admin.Do(ctx, admin.B().ClientPause().Timeout(10000).Write().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			b := &s.batchers[alg]
			before := b.batches.Load()
			times := timeCalls(t, admin)
			const n = 31
			ds := make([]sluice.Decision, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			take := func(i int) { wg.Go(func() { ds[i], errs[i] = s.Take(ctx, reqFor(i)) }) }
			take(0)
			waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.busy })
			for i := 1; i < n; i++ {
				take(i)
			}
			waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == n-1 })
			if err := admin.Do(ctx, admin.B().ClientUnpause().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if got := b.batches.Load() - before; got != 1 {
				t.Errorf("%s: %d batch calls, want 1 (30 Takes queued behind the first)", name, got)
			}
			// With Redis' clock, the lone first Take reads TIME, and the
			// batch once for its 30 requests.
			if got, want := timeCalls(t, admin)-times, map[bool]int64{false: 0, true: 2}[redisTime]; got != want {
				t.Errorf("%s: Redis ran TIME %d times for the lone Take and the batch of 30, want %d", name, got, want)
			}
			ref := sluicetest.NewReference()
			want, got := map[string]int{}, map[string]int{}
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("%s: Take %d: %v", name, i, errs[i])
				}
				r := reqFor(i)
				d, _ := ref.Take(ctx, r)
				if d.Allowed {
					want[r.Key]++
				}
				if ds[i].Allowed {
					got[r.Key]++
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: admitted per key %v, want the reference's %v", name, got, want)
			}
			// The state the batch wrote is the one a lone Take reads.
			for k := range 2 {
				d, err := s.Take(ctx, reqFor(k))
				dr, _ := ref.Take(ctx, reqFor(k))
				if err != nil || d.Allowed != dr.Allowed || d.Remaining != dr.Remaining {
					t.Errorf("%s: Take after the batch = %+v, %v; want the reference's %+v", name, d, err, dr)
				}
			}
		}
		s.Close()
	}
}

// TestFlatBatchWaiterLeaves queues Takes behind a batch Redis does not
// answer, then ends their contexts: each leaves the queue with its error
// (wrapping sluice.ErrStoreUnavailable), the batch in flight is not
// disturbed, and afterwards the store decides as the reference does,
// through the same pooled calls.
func TestFlatBatchWaiterLeaves(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := adminClient(t, srv.Addr)
	ctx := context.Background()
	s, err := New(ctx, Options{Addrs: []string{srv.Addr}, Timeout: time.Minute, RedisTime: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	alg := sluice.FixedWindow
	reqFor := func(key string) sluice.Request {
		return sluice.Request{Key: key, Algorithm: alg, Limit: sluice.PerHour(5), Cost: 1, Now: sluicetest.T0}
	}
	if err := admin.Do(ctx, admin.B().ClientPause().Timeout(30000).Write().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b := &s.batchers[alg]
	var lead sync.WaitGroup
	var leadErr error
	lead.Go(func() { _, leadErr = s.Take(ctx, reqFor("leader")) })
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.busy })
	// A caller's deadline sooner than the store's timeout is the bound of
	// its wait; cancelling that context ends the wait.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	const n = 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = s.Take(wctx, reqFor(fmt.Sprint("waiter", i))) })
	}
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == n })
	cancel()
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("waiter %d: err = %v, want ErrStoreUnavailable and context.Canceled", i, err)
		}
	}
	b.mu.Lock()
	left := len(b.queue)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d waiters still queued after they left", left)
	}
	if err := admin.Do(ctx, admin.B().ClientUnpause().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	lead.Wait()
	if leadErr != nil {
		t.Fatalf("the Take in flight: %v, want its decision once Redis answers", leadErr)
	}
	// The pooled calls serve again: 3 rounds of 12 concurrent Takes on
	// one key admit the reference's count.
	for round := range 3 {
		key := fmt.Sprint("after", round)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				d, err := s.Take(ctx, reqFor(key))
				if err != nil {
					t.Errorf("Take after: %v", err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 5 {
			t.Errorf("round %d: %d of 12 admitted, want 5 (5 an hour)", round, got)
		}
	}
}

// timeCalls is how many TIME commands Redis has run (INFO commandstats).
func timeCalls(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_time:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q", line)
			}
			return v
		}
	}
	return 0 // never run yet
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// adminClient is a plain client of the server at addr, for pausing it and
// reading its stats, closed when the test ends.
func adminClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
