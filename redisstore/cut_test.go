package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestCutMidPipeline cuts the connection in the middle of many concurrent
// decisions (pipelined and batched): Redis ran the marked one, and maybe
// others written with it, and their replies are lost. Key i was taken i
// times before, so a reply handed to the wrong caller shows in Remaining.
// Every decision reported must be its own key's; every admitted one must
// be counted in Redis, and Redis may count beyond the admitted ones only
// the calls that failed.
func TestCutMidPipeline(t *testing.T) {
	srv := redistest.StartServer(t)
	const n = 60
	cut := redistest.NewCutter(t, srv.Addr, "cut/marked", false)
	s := open(t, redisstore.Options{Addrs: []string{cut.Addr}})
	direct := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := sluice.PerHour(1000)
	key := func(i int) string {
		if i == n/2 {
			return "cut/marked"
		}
		return fmt.Sprintf("cut/%d", i)
	}
	req := func(i int) sluice.Request {
		return sluice.Request{Key: key(i), Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: sluicetest.T0}
	}
	for i := range n {
		for range i {
			if _, err := direct.Take(ctx, req(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := range 3 {
		cut.Arm()
		ds := make([]sluice.Decision, n)
		errs := make([]error, n)
		before := make([]int64, n)
		for i := range n {
			before[i] = counted(t, srv.Addr, s.Key(key(i)))
		}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { ds[i], errs[i] = s.Take(ctx, req(i)) })
		}
		wg.Wait()
		failed := 0
		for i := range n {
			after := counted(t, srv.Addr, s.Key(key(i)))
			switch {
			case errs[i] != nil:
				failed++
				if after-before[i] > 1 {
					t.Errorf("round %d: key %d counted %d times for one failed call", round, i, after-before[i])
				}
			case !ds[i].Allowed:
				t.Errorf("round %d: key %d denied: %+v", round, i, ds[i])
			case ds[i].Remaining != 1000-after:
				t.Errorf("round %d: key %d: Remaining %d, but Redis counts %d: another call's reply", round, i, ds[i].Remaining, after)
			case after != before[i]+1:
				t.Errorf("round %d: key %d admitted, Redis counts %d after %d", round, i, after, before[i])
			}
		}
		if !cut.Cut() || failed == 0 {
			t.Fatalf("round %d: no call failed (cut %v): the test did not cut", round, cut.Cut())
		}
		t.Logf("round %d: %d of %d calls lost their replies", round, failed, n)
		untilOK(t, "Take after the cut", func() error { _, err := s.Take(ctx, req(0)); return err })
	}
}

// counted is the count N of a fixed window's state in Redis (0 for none).
func counted(t *testing.T, addr, k string) int64 {
	t.Helper()
	v, err := redistest.Do(addr, "GET", k)
	if err != nil {
		t.Fatal(err)
	}
	if v == "" {
		return 0
	}
	var w, n, m int64
	if _, err := fmt.Sscan(v, &w, &n, &m); err != nil {
		t.Fatalf("GET %s = %q: %v", k, v, err)
	}
	return n
}
