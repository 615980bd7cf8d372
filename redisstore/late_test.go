package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLateRepliesAfterPause pauses redis-server (SIGSTOP) while calls are
// in flight, alone and concurrent (the solo and the pipelining client),
// so that they time out; after SIGCONT Redis runs them and answers late.
// No late reply may be taken for a later call's: every fresh key's first
// decision must be its own (Remaining 99), and the paused key's count in
// Redis is what its later decisions say.
func TestLateRepliesAfterPause(t *testing.T) {
	srv := redistest.StartServer(t)
	const timeout = 300 * time.Millisecond
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	ctx := context.Background()
	l := sluice.PerHour(100)
	req := func(key string) sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: l, Cost: 1, Now: sluicetest.T0}
	}
	untilOK(t, "Take before the pause", func() error { _, err := s.Take(ctx, req("warm")); return err })
	for range 5 {
		if _, err := s.Take(ctx, req("paused")); err != nil {
			t.Fatal(err)
		}
	}
	pid := srv.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	if _, err := s.Take(ctx, req("paused")); err == nil { // alone: the solo client
		t.Fatal("Take while paused succeeded")
	}
	var wg sync.WaitGroup
	for range 8 { // concurrent: the pipelining client, batched
		wg.Go(func() {
			if _, err := s.Take(ctx, req("paused")); err == nil {
				t.Error("concurrent Take while paused succeeded")
			}
		})
	}
	wg.Wait()
	if err := s.TakeAll(ctx, []sluice.Request{req("paused"), req("paused2")}, make([]sluice.Decision, 2)); err == nil {
		t.Fatal("TakeAll while paused succeeded")
	}
	syscall.Kill(pid, syscall.SIGCONT)
	stopped = false
	untilOK(t, "Take after SIGCONT", func() error { _, err := s.Take(ctx, req("after")); return err })
	for i := range 40 {
		var wg sync.WaitGroup
		for j := range 4 {
			wg.Go(func() {
				k := fmt.Sprintf("fresh/%d/%d", i, j)
				d, err := s.Take(ctx, req(k))
				if err != nil {
					t.Errorf("Take(%s) after SIGCONT: %v", k, err)
				} else if d.Remaining != 99 {
					t.Errorf("Take(%s), a fresh key, after SIGCONT: Remaining %d, want 99: another call's reply", k, d.Remaining)
				}
			})
		}
		wg.Wait()
	}
	d, err := s.Take(ctx, req("paused"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := redistest.Do(srv.Addr, "GET", s.Key("paused"))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(v); len(f) != 3 || f[1] != fmt.Sprint(100-d.Remaining) {
		t.Fatalf("paused key: Redis state %q, the last decision's Remaining %d: want count %d", v, d.Remaining, 100-d.Remaining)
	}
	t.Logf("paused key counts %d: 5 before, 1 after, %d of the 10 timed-out calls ran late", 100-d.Remaining, 100-d.Remaining-6)
}
