package daemon

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

const fleetRules = `
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: exact
    rate: 10/h
    algorithm: sliding_window_log
  - name: soft
    rate: %s
    algorithm: fixed_window
    sync: 50ms
  - name: hard
    rate: 10/h
    algorithm: gcra
    lease: auto
`

// checkMany sends n checks of rule for one key, alternating between the
// daemons, concurrently, and returns how many were allowed.
func checkMany(t *testing.T, ds []*testDaemon, rule string, n int) int {
	t.Helper()
	allowed := 0
	for _, a := range checkEach(t, ds, rule, n) {
		allowed += a
	}
	return allowed
}

// checkEach is checkMany, counting each daemon's allowed requests apart.
func checkEach(t *testing.T, ds []*testDaemon, rule string, n int) []int {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	allowed := make([]int, len(ds))
	for i := range n {
		j := i % len(ds)
		api := ds[j].api
		wg.Go(func() {
			got, status := check(t, api, rule, "tenant", 1)
			if status != http.StatusOK {
				t.Errorf("POST /v1/check %s: status %d", rule, status)
			}
			if got.Allowed {
				mu.Lock()
				allowed[j]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return allowed
}

// syncCounts are a daemon's counts of the soft rule's decisions (its Sync
// of 50ms): local, cold, loads (a key's first read, or a read of a view
// gone stale), and the over-limit cache's refusals (of every rule: the
// difference across one rule's requests counts that rule's).
type syncCounts struct{ local, cold, loads, cache float64 }

func syncCountsOf(d *testDaemon) syncCounts {
	return syncCounts{
		local: d.metric("sluice_fleet_sync_decisions_total", "interval", "50ms"),
		cold:  d.metric("sluice_fleet_sync_cold_total", "interval", "50ms"),
		loads: d.metric("sluice_fleet_sync_loads_total", "interval", "50ms"),
		cache: d.metric("sluice_overlimit_cache_hits_total"),
	}
}

func (c syncCounts) minus(o syncCounts) syncCounts {
	return syncCounts{c.local - o.local, c.cold - o.cold, c.loads - o.loads, c.cache - o.cache}
}

// loadSoft makes the soft rule's key an entry of d's Sync: its first
// request is cold, decided in Redis, and the next within two intervals
// loads it (decided in Redis too). It sends one request at a time until
// d's loads count one, each of which must be allowed, and returns how many
// it sent.
func loadSoft(t *testing.T, d *testDaemon) int {
	t.Helper()
	for n := 1; n <= 4; n++ {
		got, status := check(t, d.api, "soft", "tenant", 1)
		if status != http.StatusOK || !got.Allowed {
			t.Fatalf("soft, loading the key: request %d: status %d, allowed %v; want allowed", n, status, got.Allowed)
		}
		if d.metric("sluice_fleet_sync_loads_total", "interval", "50ms") >= 1 {
			return n
		}
	}
	t.Fatalf("soft: 4 requests one after another and the key is not loaded (sluice_fleet_sync_loads_total 0)")
	return 0
}

// TestFleetModes runs two daemons on one Redis with an exact rule, a soft
// one (sync) and a hard one (lease), checks each mode's bound, its metrics,
// and a reload that changes the soft rule's limit and then its mode.
func TestFleetModes(t *testing.T) {
	// The soft rule's fixed windows count in hours since the epoch, on
	// Redis's clock: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	a := startDaemon(t, fmt.Sprintf(fleetRules, rs.Addr, "10/h"))
	b := startDaemon(t, fmt.Sprintf(fleetRules, rs.Addr, "10/h"))
	ds := []*testDaemon{a, b}
	if got := checkMany(t, ds, "exact", 40); got != 10 {
		t.Errorf("exact: two daemons admitted %d of 40, want exactly 10", got)
	}
	if got := checkMany(t, ds, "hard", 40); got > 10 || got < 9 {
		t.Errorf("lease: two daemons admitted %d of 40, want at most 10 and at least 9", got)
	}
	// A soft limit: each daemon stops at the limit on its own, so two pass
	// it by at most one limit. The key is loaded on each daemon first, so
	// that the requests after are its Sync's to decide locally: how many
	// of them reach it is up to the scheduler (once one daemon's view is
	// at the limit, its over-limit cache refuses the rest), but those
	// admitted are admitted locally.
	warm := 0
	for _, d := range ds {
		warm += loadSoft(t, d)
	}
	before := []syncCounts{syncCountsOf(a), syncCountsOf(b)}
	each := checkEach(t, ds, "soft", 40)
	if got := warm + each[0] + each[1]; got < 10 || got > 20 {
		t.Errorf("sync: two daemons admitted %d of %d, want between 10 and 20", got, warm+40)
	}
	for i, d := range ds {
		if m := d.metric("sluice_rule_fleet_mode", "rule", "soft", "mode", "sync"); m != 1 {
			t.Errorf("sluice_rule_fleet_mode{rule=soft,mode=sync} = %v, want 1", m)
		}
		if m := d.metric("sluice_rule_fleet_mode", "rule", "exact", "mode", "exact"); m != 1 {
			t.Errorf("sluice_rule_fleet_mode{rule=exact,mode=exact} = %v, want 1", m)
		}
		if m := d.metric("sluice_fleet_lease_reservations_total", "chunk", "auto"); m < 1 {
			t.Errorf("sluice_fleet_lease_reservations_total = %v, want some", m)
		}
		// Each daemon's 20 requests: decided by its Sync (locally, cold,
		// or by a read, a load), or refused by the over-limit cache in
		// front of it. With the key loaded, every one it admitted was
		// decided locally, but for a cold decision or a load of a view
		// that went stale meanwhile (an entry idle two intervals is let go).
		c := syncCountsOf(d).minus(before[i])
		if c.local+c.cold+c.loads+c.cache < 20 {
			t.Errorf("daemon %d: local decisions %v, cold %v, loads %v and over-limit cache hits %v, want 20 together", i, c.local, c.cold, c.loads, c.cache)
		}
		if c.local < float64(each[i])-c.cold-c.loads {
			t.Errorf("daemon %d, key loaded: admitted %d, with %v local decisions, %v cold and %v loads; want each admission but those cold or of a load decided locally", i, each[i], c.local, c.cold, c.loads)
		}
	}
	// Reload both with a new limit: a fresh count (new fingerprint) that
	// the soft rule enforces from there.
	for _, d := range ds {
		if err := os.WriteFile(d.path, []byte(fmt.Sprintf(fleetRules, rs.Addr, "30/h")), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := d.waitReload(); r.Err != nil {
			t.Fatalf("reload: %v", r.Err)
		}
	}
	if got := checkMany(t, ds, "soft", 80); got < 30 || got > 60 {
		t.Errorf("sync after reload to 30/h: admitted %d of 80, want between 30 and 60", got)
	}
	// And make it a hard limit: from now on never past the limit.
	hard := strings.Replace(fmt.Sprintf(fleetRules, rs.Addr, "20/h"), "sync: 50ms", "lease: 3", 1)
	for _, d := range ds {
		if err := os.WriteFile(d.path, []byte(hard), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := d.waitReload(); r.Err != nil {
			t.Fatalf("reload: %v", r.Err)
		}
		if m := d.metric("sluice_rule_fleet_mode", "rule", "soft", "mode", "lease"); m != 1 {
			t.Errorf("after reload: sluice_rule_fleet_mode{rule=soft,mode=lease} = %v, want 1", m)
		}
	}
	if got := checkMany(t, ds, "soft", 60); got > 20 || got < 18 {
		t.Errorf("lease after reload to 20/h: admitted %d of 60, want at most 20 and at least 18", got)
	}
}
