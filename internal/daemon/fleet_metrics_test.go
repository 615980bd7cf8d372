package daemon

import (
	"fmt"
	"testing"

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
