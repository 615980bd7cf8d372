package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
