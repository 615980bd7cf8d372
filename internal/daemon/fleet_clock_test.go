package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSyncDaemonClockAhead: a daemon whose clock runs an hour ahead of
// Redis' decides a sync rule on Redis' clock, as it does an exact one: a
// token bucket of 10 an hour admits 10 of 12 requests at once, not 12 (an
// hour of refill that has not happened on Redis' clock).
func TestSyncDaemonClockAhead(t *testing.T) {
	rs := redistest.StartServer(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: r
    rate: 10/h
    algorithm: token_bucket
    sync: 1m
`, rs.Addr)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{ConfigPath: path, Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	api := "http://" + d.Addrs().API
	waitFor(t, "Redis connected", func() bool { return d.lazy.Connected() })
	if n := allowedOf(t, api, "r", "k", 12); n != 10 {
		t.Errorf("a daemon an hour ahead of Redis: %d of 12 allowed at once, want the burst of 10", n)
	}
}

// TestOverLimitCacheDaemonClockStepsBack: the daemon's over-limit cache
// ends a refusal by the monotonic clock too, so its wall clock stepping
// back (an NTP step) does not refuse from memory what Redis, on its own
// clock, admits again: once Redis' one-second window has ended, the
// daemon, its clock now 2 s back, gets the key admitted. Over one Redis
// and a 3-node Cluster.
func TestOverLimitCacheDaemonClockStepsBack(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		rs := redistest.StartServer(t)
		testOverLimitCacheDaemonClockStepsBack(t, rs.Addr, false)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		testOverLimitCacheDaemonClockStepsBack(t, strings.Join(c.Addrs, ", "), true)
	})
}

func testOverLimitCacheDaemonClockStepsBack(t *testing.T, addrs string, cluster bool) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: %v, timeout: 2s}
  on_error: deny
rules:
  - name: r
    rate: 1/s
    algorithm: fixed_window
`, addrs, cluster)), 0o644); err != nil {
		t.Fatal(err)
	}
	var back atomic.Int64 // ns the daemon's clock has stepped back
	td := startDaemonWith(t, path, func(o *Options) {
		o.Now = func() time.Time { return time.Now().Add(-time.Duration(back.Load())) }
	})
	waitFor(t, "Redis connected", func() bool { return td.d.lazy.Connected() })
	redistest.ClearOfWindowEdge(t, time.Second, 250*time.Millisecond)
	start := time.Now()
	if n := allowedOf(t, td.api, "r", "k", 3); n != 1 {
		t.Fatalf("%d of 3 allowed, want 1", n)
	}
	if v := td.metric("sluice_overlimit_cache_hits_total"); v != 1 {
		t.Fatalf("sluice_overlimit_cache_hits_total = %v, want 1 (the third request)", v)
	}
	end := start.Truncate(time.Second).Add(time.Second + 10*time.Millisecond) // Redis' window is over
	for time.Now().Before(end) {
		time.Sleep(time.Until(end))
	}
	back.Store(int64(2 * time.Second))
	if n := allowedOf(t, td.api, "r", "k", 1); n != 1 {
		t.Errorf("after Redis' window ended, the daemon's clock 2 s back: %d of 1 allowed, want 1 (cache hits %v)", n, td.metric("sluice_overlimit_cache_hits_total"))
	}
}
