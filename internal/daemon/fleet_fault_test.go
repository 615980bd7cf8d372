package daemon

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOverLimitCacheRedisRestarted: a key Redis refused is answered from
// the over-limit cache; Redis then restarts without persistence while the
// daemon sends it nothing (every request for the key is a cache hit, so no
// call fails). Redis now admits the key: the cache must stop refusing it.
// (on_error: deny, so that only Redis admits: the first call on the
// connection to the old server may fail.)
func TestOverLimitCacheRedisRestarted(t *testing.T) {
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: r
    rate: 1/h
    algorithm: fixed_window
`, rs.Addr))
	if n := allowedOf(t, td.api, "r", "k", 3); n != 1 {
		t.Fatalf("Redis up: %d of 3 allowed, want 1", n)
	}
	if v := td.metric("sluice_overlimit_cache_hits_total"); v != 1 {
		t.Fatalf("sluice_overlimit_cache_hits_total = %v, want 1 (the third request)", v)
	}
	rs.Stop()
	rs.Restart()
	waitFor(t, "the restarted (empty) Redis to admit the key", func() bool {
		a, status := check(t, td.api, "r", "k", 1)
		return status == http.StatusOK && a.Allowed
	})
	if n := allowedOf(t, td.api, "r", "k", 2); n != 0 {
		t.Fatalf("after the admission on the restarted Redis: %d of 2 allowed, want 0", n)
	}
}
