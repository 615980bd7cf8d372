package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// allowedOf counts how many of n checks are allowed.
func allowedOf(t *testing.T, api, rule, key string, n int) int {
	t.Helper()
	a := 0
	for range n {
		got, status := check(t, api, rule, key, 1)
		if status != http.StatusOK {
			t.Fatalf("POST /v1/check %s/%s: status %d", rule, key, status)
		}
		if got.Allowed {
			a++
		}
	}
	return a
}

// TestStartWithoutRedisLocal starts the daemon while its Redis is down,
// with on_error: local: it answers at once from memory at the local share,
// /readyz fails, and once Redis is up the daemon connects, /readyz passes
// and decisions go to Redis.
func TestStartWithoutRedisLocal(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	rs.Stop()
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s} # no call may time out while Redis is up: the counts are exact
  on_error: local
  expected_instances: 3
rules:
  - name: r
    rate: 9/h
    algorithm: fixed_window
`, rs.Addr))
	if got := get(t, td.api+"/readyz"); got.status != http.StatusServiceUnavailable || !strings.Contains(got.body, "deciding locally at rate/3") {
		t.Fatalf("GET /readyz with Redis down: %d %q, want 503 naming local mode", got.status, got.body)
	}
	if n := allowedOf(t, td.api, "r", "k", 5); n != 3 {
		t.Fatalf("Redis down: %d of 5 allowed, want the local share 9/3 = 3", n)
	}
	if v := td.metric("sluice_store_local"); v != 1 {
		t.Fatalf("sluice_store_local = %v with Redis down, want 1", v)
	}
	if v := td.metric("sluice_store_local_decisions_total"); v != 5 {
		t.Fatalf("sluice_store_local_decisions_total = %v, want 5", v)
	}
	rs.Restart()
	waitFor(t, "/readyz to pass", func() bool { return get(t, td.api+"/readyz").status == http.StatusOK })
	waitFor(t, "decisions back on Redis", func() bool { return td.metric("sluice_store_local") == 0 })
	if n := allowedOf(t, td.api, "r", "k", 12); n != 9 {
		t.Fatalf("Redis up: %d of 12 allowed, want the rule's 9", n)
	}
	keys, err := redistest.Do(rs.Addr, "DBSIZE")
	if err != nil || keys == "0" {
		t.Fatalf("DBSIZE = %q, %v: the decisions did not reach Redis", keys, err)
	}
	// The 3 refusals past the limit: the first from Redis, the others
	// from the over-limit cache.
	if v := td.metric("sluice_overlimit_cache_hits_total"); v != 2 {
		t.Fatalf("sluice_overlimit_cache_hits_total = %v, want 2", v)
	}
}

// TestStartWithoutRedisAllow: with on_error: allow the daemon also starts
// while Redis is down, failing open until it connects.
func TestStartWithoutRedisAllow(t *testing.T) {
	rs := redistest.StartServer(t)
	rs.Stop()
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s} # no call may time out while Redis is up: the counts are exact
rules:
  - name: r
    rate: 2/h
`, rs.Addr))
	if n := allowedOf(t, td.api, "r", "k", 4); n != 4 {
		t.Fatalf("Redis down, on_error allow: %d of 4 allowed, want all", n)
	}
	if got := get(t, td.api+"/readyz"); got.status != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz with Redis down: %d, want 503", got.status)
	}
	rs.Restart()
	waitFor(t, "/readyz to pass", func() bool { return get(t, td.api+"/readyz").status == http.StatusOK })
	if n := allowedOf(t, td.api, "r", "k", 4); n != 2 {
		t.Fatalf("Redis up: %d of 4 allowed, want 2", n)
	}
}

// TestOverLimitCacheShadow: a shadow rule's refusals answered by the
// over-limit cache still count as shadow_denied.
func TestOverLimitCacheShadow(t *testing.T) {
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: watch
    rate: 2/h
    action: shadow
`, rs.Addr))
	if n := allowedOf(t, td.api, "watch", "k", 6); n != 6 {
		t.Fatalf("shadow rule: %d of 6 allowed, want all", n)
	}
	if v := td.metric("sluice_decisions_total", "rule", "watch", "result", "shadow_denied"); v != 4 {
		t.Fatalf("shadow_denied = %v, want 4", v)
	}
	if v := td.metric("sluice_overlimit_cache_hits_total"); v != 3 {
		t.Fatalf("cache hits = %v, want 3 (the first refusal came from Redis)", v)
	}
	body := get(t, td.api+"/metrics").body
	for _, name := range []string{"sluice_overlimit_cache_hits_total", "sluice_overlimit_cache_keys"} {
		if !strings.Contains(body, name) {
			t.Errorf("GET /metrics: no %s", name)
		}
	}
}

// TestSentinelConfig: with store.redis.sentinel the daemon finds the master
// through a real Sentinel and counts there.
func TestSentinelConfig(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, master)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], sentinel: mymaster, timeout: 2s}
rules:
  - name: r
    rate: 3/h
`, sentinel))
	if n := allowedOf(t, td.api, "r", "k", 5); n != 3 {
		t.Fatalf("through the Sentinel: %d of 5 allowed, want 3", n)
	}
	if got := get(t, td.api+"/readyz"); got.status != http.StatusOK {
		t.Fatalf("GET /readyz: %d, want 200", got.status)
	}
	if keys, err := redistest.Do(master.Addr, "DBSIZE"); err != nil || keys == "0" {
		t.Fatalf("DBSIZE on the master = %q, %v: the decisions did not reach it", keys, err)
	}
}

// While Redis is down (on_error: local) a sharded rule counts on one local
// counter at its share rate/expected_instances: shards spread Redis's load
// and have nothing to spread in memory. Each shard's local share rounded
// up to 1 let one instance admit one request per shard, 16 where the
// share is 10 (a fleet of 10 admitting 160 of a limit of 100).
func TestShardsLocalFallback(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: local
  expected_instances: 10
rules:
  - name: split
    rate: 100/h
    algorithm: fixed_window
    shards: 16
  - name: other
    rate: 100/h
`, rs.Addr))
	if n := allowedOf(t, td.api, "split", "k", 3); n != 3 {
		t.Fatalf("Redis up: %d of 3 allowed, want 3", n)
	}
	rs.Stop()
	allowedOf(t, td.api, "other", "k", 1) // fails on Redis: the daemon decides locally from now on
	if v := td.metric("sluice_store_local"); v != 1 {
		t.Fatalf("sluice_store_local = %v after a failed call, want 1", v)
	}
	if n := allowedOf(t, td.api, "split", "k", 30); n != 10 {
		t.Errorf("Redis down: sharded rule admitted %d of 30, want its local share 100/10 = 10", n)
	}
}
