package daemon

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// metricsConfig is a daemon on Redis at addr with the rules given (YAML
// list items).
func metricsConfig(addr, rules string) string {
	return fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 5s}
rules:
  - name: other
    rate: 1000/d
    algorithm: fixed_window
%s`, addr, rules)
}

const (
	softRule = `  - name: soft
    rate: 1000/d
    algorithm: fixed_window
    sync: 1m
`
	hardRule = `  - name: hard
    rate: 1000/d
    algorithm: fixed_window
    lease: 10
`
)

// TestFleetMetricsRetired: a reload that removes the only rule of a sync
// interval and of a lease chunk closes their decorators, which send the
// last batch and give the units held back; the counters show that batch
// and those units, and keep them (a counter that vanished, or came back
// at 0 with the interval, would read as a reset and lose them).
func TestFleetMetricsRetired(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	probe := probeRedis(t, rs.Addr)
	td := startDaemon(t, metricsConfig(rs.Addr, softRule+hardRule))
	hard := td.d.cur.Load().rules.Rule("hard")
	// soft: cold, the entry's first read, then 3 local hits pending until
	// a batch (1m away). hard: cold, then 10 reserved and 2 spent.
	if n := allowedOf(t, td.api, "soft", "k", 5); n != 5 {
		t.Fatalf("soft: %d of 5 allowed", n)
	}
	if n := allowedOf(t, td.api, "hard", "k", 3); n != 3 {
		t.Fatalf("hard: %d of 3 allowed", n)
	}
	if b := td.metric("sluice_fleet_sync_batches_total", "interval", "1m0s"); b != 0 {
		t.Fatalf("sluice_fleet_sync_batches_total{interval=1m0s} = %v before the reload, want 0 (no batch due)", b)
	}
	if g := td.metric("sluice_fleet_lease_units_granted_total", "chunk", "10"); g != 10 {
		t.Fatalf("sluice_fleet_lease_units_granted_total{chunk=10} = %v, want 10", g)
	}
	replaceFile(t, td.path, metricsConfig(rs.Addr, ""))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if got := counted(t, probe, hard, "k"); got != 3 {
		t.Fatalf("hard: Redis counts %d after the reload, want the 3 admitted", got)
	}
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"sluice_fleet_sync_batches_total", "interval", "1m0s", 1},
		{"sluice_fleet_sync_batch_keys_total", "interval", "1m0s", 1},
		{"sluice_fleet_sync_batch_seconds", "interval", "1m0s", 1},
		{"sluice_fleet_lease_units_granted_total", "chunk", "10", 10},
		{"sluice_fleet_lease_units_spent_total", "chunk", "10", 2},
		{"sluice_fleet_lease_units_returned_total", "chunk", "10", 8},
		{"sluice_fleet_lease_reserve_seconds", "chunk", "10", 1},
	} {
		if got := td.metric(c.name, c.label, c.value); got != c.want {
			t.Errorf("after the reload that retired it: %s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	for _, rule := range []string{"soft", "hard"} {
		if m := td.metric("sluice_rule_fleet_mode", "rule", rule); m != 0 {
			t.Errorf("sluice_rule_fleet_mode{rule=%s} = %v after the reload removed it, want no series", rule, m)
		}
	}
	// The interval and the chunk come back: their counters go on from
	// where they were, never down.
	replaceFile(t, td.path, metricsConfig(rs.Addr, softRule+hardRule))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if g := td.metric("sluice_fleet_lease_units_granted_total", "chunk", "10"); g != 10 {
		t.Errorf("sluice_fleet_lease_units_granted_total{chunk=10} = %v once the chunk is back, want still 10", g)
	}
	if b := td.metric("sluice_fleet_sync_batches_total", "interval", "1m0s"); b != 1 {
		t.Errorf("sluice_fleet_sync_batches_total{interval=1m0s} = %v once the interval is back, want still 1", b)
	}
	if h := td.metric("sluice_fleet_sync_batch_seconds", "interval", "1m0s"); h != 1 {
		t.Errorf("sluice_fleet_sync_batch_seconds{interval=1m0s} count = %v once the interval is back, want still 1", h)
	}
}

// commandsRun is how many commands Redis at addr has run (INFO stats),
// not counting the INFO that asks.
func commandsRun(t *testing.T, addr string) int64 {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "stats")
	if err != nil {
		t.Fatalf("INFO stats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO stats: %q", line)
			}
			return n
		}
	}
	t.Fatalf("INFO stats: no total_commands_processed in %q", info)
	return 0
}

// TestFleetMetricsMove: on a real daemon and Redis, each fleet metric
// moves with what it counts. A sync batch counts one batch, its keys and
// its round trip; a lease reservation its units and round trip, and the
// shutdown's give-back the units held; an over-limit cache hit is counted
// and costs no Redis command; the mode gauge follows a reload that
// changes a rule's mode and drops a rule the reload removes.
func TestFleetMetricsMove(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	td := startDaemon(t, metricsConfig(rs.Addr, softRule+hardRule))
	for rule, mode := range map[string]string{"other": "exact", "soft": "sync", "hard": "lease"} {
		if m := td.metric("sluice_rule_fleet_mode", "rule", rule, "mode", mode); m != 1 {
			t.Errorf("sluice_rule_fleet_mode{rule=%s,mode=%s} = %v, want 1", rule, mode, m)
		}
		if m := td.metric("sluice_rule_fleet_mode", "rule", rule); m != 1 {
			t.Errorf("sluice_rule_fleet_mode{rule=%s} sums to %v, want 1 (one mode)", rule, m)
		}
	}

	// Sync: two keys with hits pending, one batch.
	for _, k := range []string{"a", "b"} {
		if n := allowedOf(t, td.api, "soft", k, 3); n != 3 {
			t.Fatalf("soft/%s: %d of 3 allowed", k, n)
		}
	}
	if err := td.d.fleet.syncs[time.Minute].Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"sluice_fleet_sync_batches_total", 1},
		{"sluice_fleet_sync_batch_keys_total", 2},
		{"sluice_fleet_sync_batch_seconds", 1},
		{"sluice_fleet_sync_batch_errors_total", 0},
		{"sluice_fleet_sync_cold_total", 2},
		{"sluice_fleet_sync_loads_total", 2},
		{"sluice_fleet_sync_decisions_total", 2},
	} {
		if got := td.metric(c.name, "interval", "1m0s"); got != c.want {
			t.Errorf("after one batch of 2 keys: %s{interval=1m0s} = %v, want %v", c.name, got, c.want)
		}
	}
	if k := td.metric("sluice_fleet_sync_keys", "interval", "1m0s"); k != 2 {
		t.Errorf("sluice_fleet_sync_keys{interval=1m0s} = %v, want the 2 keys held", k)
	}
	// The batch's size, observed: one batch of 2 keys.
	if n, sum := histogram(t, td, "sluice_fleet_sync_batch_size", "interval", "1m0s"); n != 1 || sum != 2 {
		t.Errorf("sluice_fleet_sync_batch_size{interval=1m0s}: %d observations summing to %v, want 1 of 2", n, sum)
	}

	// Lease: cold, then one reservation of 10, 2 spent.
	if n := allowedOf(t, td.api, "hard", "k", 3); n != 3 {
		t.Fatalf("hard: %d of 3 allowed", n)
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"sluice_fleet_lease_reservations_total", 1},
		{"sluice_fleet_lease_reserve_seconds", 1},
		{"sluice_fleet_lease_units_granted_total", 10},
		{"sluice_fleet_lease_units_spent_total", 2},
		{"sluice_fleet_lease_units_returned_total", 0},
		{"sluice_fleet_lease_cold_total", 1},
	} {
		if got := td.metric(c.name, "chunk", "10"); got != c.want {
			t.Errorf("after one reservation: %s{chunk=10} = %v, want %v", c.name, got, c.want)
		}
	}
	if k := td.metric("sluice_fleet_lease_keys", "chunk", "10"); k != 1 {
		t.Errorf("sluice_fleet_lease_keys{chunk=10} = %v, want the 1 key held", k)
	}

	// The over-limit cache: "other" at its limit is refused by Redis once,
	// then from the cache, with no command to Redis.
	replaceFile(t, td.path, strings.Replace(metricsConfig(rs.Addr, softRule+hardRule), "rate: 1000/d", "rate: 2/h", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if n := allowedOf(t, td.api, "other", "x", 3); n != 2 {
		t.Fatalf("other at 2/h: %d of 3 allowed, want 2", n)
	}
	hits, before := td.metric("sluice_overlimit_cache_hits_total"), commandsRun(t, rs.Addr)
	if n := allowedOf(t, td.api, "other", "x", 4); n != 0 {
		t.Fatalf("other over its limit: %d of 4 allowed, want 0", n)
	}
	if after := commandsRun(t, rs.Addr); after != before+1 { // +1: the first INFO
		t.Errorf("Redis ran %d commands for 4 refusals the over-limit cache answers, want 0", after-before-1)
	}
	if got := td.metric("sluice_overlimit_cache_hits_total"); got != hits+4 {
		t.Errorf("sluice_overlimit_cache_hits_total = %v after 4 cached refusals, want %v", got, hits+4)
	}

	// A reload that makes soft exact and removes hard.
	exact := metricsConfig(rs.Addr, strings.Replace(softRule, "    sync: 1m\n", "", 1))
	replaceFile(t, td.path, exact)
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if m := td.metric("sluice_rule_fleet_mode", "rule", "soft", "mode", "exact"); m != 1 {
		t.Errorf("after the reload: sluice_rule_fleet_mode{rule=soft,mode=exact} = %v, want 1", m)
	}
	for _, labels := range [][]string{{"rule", "soft", "mode", "sync"}, {"rule", "hard"}} {
		if m := td.metric("sluice_rule_fleet_mode", labels...); m != 0 {
			t.Errorf("after the reload: sluice_rule_fleet_mode%v = %v, want no series", labels, m)
		}
	}
	// The reload gave hard's 8 units back.
	if got := td.metric("sluice_fleet_lease_units_returned_total", "chunk", "10"); got != 8 {
		t.Errorf("after the reload removed hard: sluice_fleet_lease_units_returned_total{chunk=10} = %v, want the 8 held", got)
	}
}

// TestFleetMetricsShutdown: the units a lease holds at shutdown go back
// to Redis and are counted.
func TestFleetMetricsShutdown(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	probe := probeRedis(t, rs.Addr)
	td := startDaemon(t, metricsConfig(rs.Addr, hardRule))
	hard := td.d.cur.Load().rules.Rule("hard")
	if n := allowedOf(t, td.api, "hard", "k", 3); n != 3 {
		t.Fatalf("hard: %d of 3 allowed", n)
	}
	if err := td.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := counted(t, probe, hard, "k"); got != 3 {
		t.Errorf("Redis counts %d after shutdown, want the 3 admitted", got)
	}
	if got := td.metric("sluice_fleet_lease_units_returned_total", "chunk", "10"); got != 8 {
		t.Errorf("after shutdown: sluice_fleet_lease_units_returned_total{chunk=10} = %v, want the 8 held", got)
	}
}

// TestLocalModeShows: with on_error: local, a Redis that stops under a
// running daemon moves it to local mode, which the metric and /readyz
// show; once Redis answers again both show the daemon back on Redis, and
// the switch is counted once.
func TestLocalModeShows(t *testing.T) {
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
    rate: 10/h
    algorithm: fixed_window
`, rs.Addr))
	if n := allowedOf(t, td.api, "r", "k", 2); n != 2 {
		t.Fatalf("Redis up: %d of 2 allowed", n)
	}
	if v, got := td.metric("sluice_store_local"), get(t, td.api+"/readyz"); v != 0 || got.status != http.StatusOK {
		t.Fatalf("Redis up: sluice_store_local = %v, /readyz %d %q; want 0 and 200", v, got.status, got.body)
	}
	rs.Stop()
	first := allowedOf(t, td.api, "r", "k", 1) // fails on Redis, decided locally: local mode from now on
	if v := td.metric("sluice_store_local"); v != 1 {
		t.Fatalf("sluice_store_local = %v after a failed call, want 1", v)
	}
	if got := get(t, td.api+"/readyz"); got.status != http.StatusServiceUnavailable || !strings.Contains(got.body, "deciding locally at rate/2") {
		t.Errorf("GET /readyz in local mode: %d %q, want 503 naming local mode", got.status, got.body)
	}
	local := td.metric("sluice_store_local_decisions_total")
	if n := first + allowedOf(t, td.api, "r", "k", 7); n != 5 {
		t.Errorf("local mode: %d of 8 allowed, want the share 10/2 = 5", n)
	}
	if got := td.metric("sluice_store_local_decisions_total"); got != local+7 {
		t.Errorf("sluice_store_local_decisions_total = %v after 7 local decisions, want %v", got, local+7)
	}
	rs.Restart()
	waitFor(t, "decisions back on Redis", func() bool { return td.metric("sluice_store_local") == 0 })
	if got := get(t, td.api+"/readyz"); got.status != http.StatusOK {
		t.Errorf("GET /readyz back on Redis: %d %q, want 200", got.status, got.body)
	}
	if v := td.metric("sluice_store_local_switches_total"); v != 1 {
		t.Errorf("sluice_store_local_switches_total = %v, want 1", v)
	}
	local = td.metric("sluice_store_local_decisions_total")
	allowedOf(t, td.api, "r", "k", 1)
	if got := td.metric("sluice_store_local_decisions_total"); got != local {
		t.Errorf("back on Redis: sluice_store_local_decisions_total moved %v → %v, want no local decision", local, got)
	}
}

// histogram returns the count and sum of the histogram name whose labels
// include labels, or zeros.
func histogram(t *testing.T, td *testDaemon, name string, labels ...string) (uint64, float64) {
	t.Helper()
	mfs, err := td.d.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil && hasLabels(m, labels) {
				return h.GetSampleCount(), h.GetSampleSum()
			}
		}
	}
	return 0, 0
}
