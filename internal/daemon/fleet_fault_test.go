package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOverLimitCacheRedisRestarted: a key Redis refused is answered from
// the over-limit cache; Redis then restarts without persistence while the
// daemon sends it nothing (every request for the key is a cache hit, so no
// call fails). Redis now admits the key: the cache must stop refusing it.
// (on_error: deny, so that only Redis admits: the first call on the
// connection to the old server may fail.)
func TestOverLimitCacheRedisRestarted(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
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

// TestOverLimitCacheReloadRaisesRate: a refusal cached under a rule's old
// rate must not outlive a reload that raises it.
func TestOverLimitCacheReloadRaisesRate(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	base := fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: r
    rate: 2/h
    algorithm: %%s
%%s`, rs.Addr)
	for _, c := range []struct{ alg, mode string }{
		{"fixed_window", ""}, {"token_bucket", ""}, {"gcra", "    sync: 1m\n"}, {"fixed_window", "    lease: auto\n"},
	} {
		t.Run(c.alg+strings.TrimSpace(c.mode), func(t *testing.T) {
			_, err := redistest.Do(rs.Addr, "FLUSHALL")
			if err != nil {
				t.Fatal(err)
			}
			td := startDaemon(t, fmt.Sprintf(base, c.alg, c.mode))
			if n := allowedOf(t, td.api, "r", "k", 4); n != 2 {
				t.Fatalf("rate 2/h: %d of 4 allowed, want 2", n)
			}
			replaceFile(t, td.path, strings.Replace(fmt.Sprintf(base, c.alg, c.mode), "2/h", "5/h", 1))
			if r := td.waitReload(); r.Err != nil {
				t.Fatalf("reload: %v", r.Err)
			}
			if n := allowedOf(t, td.api, "r", "k", 7); n != 5 {
				t.Fatalf("after raising the rate to 5/h: %d of 7 allowed, want 5 (fresh counters)", n)
			}
		})
	}
}

// TestLocalModeAfterRefusal: what a key Redis refused gets once Redis
// stops. The over-limit cache's subscription to refunds is cut with
// Redis's connections, which empties and pauses the cache (a refund
// made meanwhile would go unseen): the key's next request goes to Redis
// and fails, which moves the daemon to local mode, and the key then gets
// its local share, counted from empty. (Before the cache subscribed, it
// kept refusing the key until a call failed.)
func TestLocalModeAfterRefusal(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: local
  expected_instances: 2
rules:
  - name: r
    rate: 4/h
    algorithm: fixed_window
`, rs.Addr))
	if n := allowedOf(t, td.api, "r", "k", 6); n != 4 {
		t.Fatalf("Redis up: %d of 6 allowed, want 4", n)
	}
	cache := td.d.fallback.Unwrap().(*fleet.OverLimitCache)
	if cache.Paused() || cache.Len() != 1 {
		t.Fatalf("Redis up: cache paused %v with %d keys; want live with the key refused", cache.Paused(), cache.Len())
	}
	rs.Stop()
	deadline := time.Now().Add(time.Minute)
	for !cache.Paused() {
		if time.Now().After(deadline) {
			t.Fatal("Redis stopped: the over-limit cache never paused")
		}
		time.Sleep(time.Millisecond)
	}
	if v := td.metric("sluice_store_local"); v != 0 {
		t.Fatalf("sluice_store_local = %v before any call failed, want 0", v)
	}
	if n := allowedOf(t, td.api, "r", "k", 3); n != 2 {
		t.Fatalf("Redis stopped: %d of 3 allowed, want the local share 4/2 = 2 (the cache paused: the first call failed)", n)
	}
	if v := td.metric("sluice_store_local"); v != 1 {
		t.Fatalf("sluice_store_local = %v after a failed call, want 1", v)
	}
	if n := allowedOf(t, td.api, "r", "other", 1); n != 1 {
		t.Fatalf("Redis stopped, a new key: %d of 1 allowed, want 1 (local mode)", n)
	}
	if got := get(t, td.api+"/readyz"); got.status != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz in local mode: %d", got.status)
	}
}

// TestLeaseRedisRestarted: a lease rule's key that Redis has no units
// left for ("full") is refused on the instance (without a round trip)
// until Redis frees some, and another ("held") holds a unit reserved and
// not spent. Redis then restarts without persistence while the daemon is
// idle. The restarted Redis admits "full": the lease must stop refusing
// it; and it never counted the unit "held" holds: spent, it would take the
// fleet past the limit on the new server.
func TestLeaseRedisRestarted(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: r
    rate: 4/h
    algorithm: fixed_window
    lease: 2
`, rs.Addr))
	if n := allowedOf(t, td.api, "r", "full", 6); n != 4 {
		t.Fatalf("Redis up: %d of 6 allowed, want 4", n)
	}
	// The first request is decided in Redis (a key asked for once gets no
	// lease), the second reserves 2 units and spends one.
	if n := allowedOf(t, td.api, "r", "held", 2); n != 2 {
		t.Fatalf("Redis up: %d of 2 allowed, want 2", n)
	}
	if got, err := redistest.Do(rs.Addr, "GET", "sluice:{r|"+td.d.engine().Rules().Rule("r").Fingerprint+"|held}"); err != nil || !strings.HasSuffix(got, " 3 0") {
		t.Fatalf("the held key's state in Redis = %q, %v; want 3 counted (1 spent, 2 reserved)", got, err)
	}
	rs.Stop()
	rs.Restart()
	waitFor(t, "the restarted (empty) Redis to admit the key", func() bool {
		a, status := check(t, td.api, "r", "full", 1)
		return status == http.StatusOK && a.Allowed
	})
	for _, key := range []string{"full", "held"} {
		n := allowedOf(t, td.api, "r", key, 6)
		if key == "full" {
			n++
		}
		if n != 4 {
			t.Errorf("%s on the restarted Redis: %d allowed, want the limit 4", key, n)
		}
	}
}

// TestRedisReplacedByAnother: the daemon's Redis address moves to another
// server (a virtual IP, a DNS name) that has none of the first one's
// counts. The new server admits what the old one refused: neither the
// over-limit cache nor a lease may go on refusing it, and a lease's units
// from the old server are not spent on the new one.
func TestRedisReplacedByAnother(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	sw := redistest.NewSwitch(t, a.Addr)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: exact
    rate: 2/h
    algorithm: fixed_window
  - name: lease
    rate: 4/h
    algorithm: fixed_window
    lease: 2
`, sw.Addr))
	if n := allowedOf(t, td.api, "exact", "k", 4); n != 2 {
		t.Fatalf("exact on the first server: %d of 4 allowed, want 2", n)
	}
	if n := allowedOf(t, td.api, "lease", "k", 6); n != 4 {
		t.Fatalf("lease on the first server: %d of 6 allowed, want 4", n)
	}
	if n := allowedOf(t, td.api, "lease", "held", 2); n != 2 { // one unit held
		t.Fatalf("lease on the first server: %d of 2 allowed, want 2", n)
	}
	sw.To(b.Addr)
	for _, rule := range []string{"exact", "lease"} {
		waitFor(t, rule+": the new server to admit the key", func() bool {
			a, status := check(t, td.api, rule, "k", 1)
			return status == http.StatusOK && a.Allowed
		})
	}
	if n := 1 + allowedOf(t, td.api, "exact", "k", 3); n != 2 {
		t.Errorf("exact on the new server: %d allowed, want 2", n)
	}
	if n := 1 + allowedOf(t, td.api, "lease", "k", 5); n != 4 {
		t.Errorf("lease on the new server: %d allowed, want 4", n)
	}
	if n := allowedOf(t, td.api, "lease", "held", 6); n != 4 {
		t.Errorf("lease, the key with a unit held: %d allowed on the new server, want 4", n)
	}
}

// TestLeaseHeldThroughOutage: units reserved before Redis becomes
// unreachable (its data kept: a network cut, redistest.Gate) are spent
// while it is: they were counted. Past them on_error applies; once Redis
// is reachable again, it counts exactly what the daemon admitted, never
// more than the limit.
func TestLeaseHeldThroughOutage(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	gate := redistest.NewGate(t, rs.Addr)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: r
    rate: 10/h
    algorithm: fixed_window
    lease: 5
`, gate.Addr))
	// The first request is decided in Redis, the second reserves 5 units
	// and spends one: 4 held.
	if n := allowedOf(t, td.api, "r", "k", 2); n != 2 {
		t.Fatalf("Redis up: %d of 2 allowed", n)
	}
	gate.Shut()
	if n := allowedOf(t, td.api, "r", "k", 4); n != 4 {
		t.Fatalf("Redis unreachable: %d of the 4 units held spent, want 4", n)
	}
	if _, status := check(t, td.api, "r", "k", 1); status != http.StatusServiceUnavailable {
		t.Fatalf("Redis unreachable, no unit held: %d, want 503 (on_error: deny)", status)
	}
	gate.Open()
	n := 6 // admitted so far
	waitFor(t, "Redis reachable again", func() bool {
		a, status := check(t, td.api, "r", "k", 1)
		if a.Allowed {
			n++
		}
		return status == http.StatusOK
	})
	n += allowedOf(t, td.api, "r", "k", 10)
	if n != 10 {
		t.Fatalf("%d admitted in all, want the limit 10", n)
	}
}

// TestSyncRedisRestarted: a sync rule's key refused from the instance's
// view (and then from the over-limit cache); Redis restarts without
// persistence while the daemon is idle. The restarted Redis admits the
// key: neither the cache nor the view, read from the old server and good
// for two intervals (here minutes), may go on refusing it.
func TestSyncRedisRestarted(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: r
    rate: 3/h
    algorithm: fixed_window
    sync: 1m
`, rs.Addr))
	if n := allowedOf(t, td.api, "r", "k", 5); n != 3 {
		t.Fatalf("Redis up: %d of 5 allowed, want 3", n)
	}
	rs.Stop()
	rs.Restart()
	waitFor(t, "the restarted (empty) Redis to admit the key", func() bool {
		a, status := check(t, td.api, "r", "k", 1)
		return status == http.StatusOK && a.Allowed
	})
	// The first two requests were decided in Redis (cold, then the
	// view's read), the third from the view: its hit, not sent yet (the
	// batch is a minute away), goes to the new server, which admits 2.
	if n := 1 + allowedOf(t, td.api, "r", "k", 4); n != 2 {
		t.Fatalf("on the restarted Redis: %d of 5 allowed, want 2 (3, less the hit sent there)", n)
	}
}
