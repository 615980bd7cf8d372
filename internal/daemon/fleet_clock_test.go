package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFleetDaemonClockAhead: a daemon whose clock runs an hour ahead of
// Redis' decides a sync rule, and a lease rule, on Redis' clock, as it
// does an exact one: a token bucket of 10 an hour admits 10 of 12 requests
// at once, not 12 (an hour of refill that has not happened on Redis'
// clock). Over one Redis and a 3-node Cluster.
func TestFleetDaemonClockAhead(t *testing.T) {
	for _, mode := range []string{"sync: 1m", "lease: auto"} {
		t.Run(strings.TrimSuffix(strings.Fields(mode)[0], ":"), func(t *testing.T) {
			t.Run("server", func(t *testing.T) {
				t.Parallel() // a Redis (or Cluster) and a daemon of its own
				rs := redistest.StartServer(t)
				testFleetDaemonClockAhead(t, rs.Addr, false, mode)
			})
			t.Run("cluster", func(t *testing.T) {
				t.Parallel() // a Redis (or Cluster) and a daemon of its own
				c := redistest.StartCluster(t)
				testFleetDaemonClockAhead(t, strings.Join(c.Addrs, ", "), true, mode)
			})
		})
	}
}

func testFleetDaemonClockAhead(t *testing.T, addrs string, cluster bool, mode string) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], cluster: %v, timeout: 2s}
rules:
  - name: r
    rate: 10/h
    algorithm: token_bucket
    %s
`, addrs, cluster, mode)), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonWith(t, path, func(o *Options) {
		o.Now = func() time.Time { return time.Now().Add(time.Hour) }
	})
	waitFor(t, "Redis connected", func() bool { return td.d.lazy.Connected() })
	if n := allowedOf(t, td.api, "r", "k", 12); n != 10 {
		t.Errorf("a daemon an hour ahead of Redis (%s): %d of 12 allowed at once, want the burst of 10", mode, n)
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
		t.Parallel() // a Redis (or Cluster) and a daemon of its own
		rs := redistest.StartServer(t)
		testOverLimitCacheDaemonClockStepsBack(t, rs.Addr, false)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel() // a Redis (or Cluster) and a daemon of its own
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
