package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRefusedReloadLeavesNoFleetSeries: a reload refused after the fleet
// routes of its rules were prepared (here by the Redis user's ACL, which
// lacks the ZADD of its shards: auto rule) leaves /metrics as it was: no
// sync interval or lease chunk of the refused config's rules shows there,
// as none was ever used. A later reload that passes puts them in force;
// once retired, a refused reload that brings them back leaves them.
func TestRefusedReloadLeavesNoFleetSeries(t *testing.T) {
	rs := redistest.StartServer(t)
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "nozadd", "on", ">pw", "~sluice:*", "&*", "+@all", "-zadd"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := needsConfig([]string{rs.Addr}, false, "nozadd") + "  - {name: soft, rate: 1000/m, algorithm: gcra, sync: 50ms}\n"
	added := "  - {name: soft2, rate: 1000/m, algorithm: gcra, sync: 77ms}\n  - {name: hard2, rate: 1000/m, algorithm: gcra, lease: 7}\n"
	write(base)
	td := startDaemonFile(t, path)
	waitFor(t, "Redis connected", td.d.lazy.Connected)
	before := get(t, td.api+"/metrics").body
	if !strings.Contains(before, `interval="50ms"`) {
		t.Fatalf("/metrics before the reload shows no sync interval 50ms:\n%s", grepLines(before, "sluice_fleet_"))
	}

	write(base + added + "  - {name: hot, rate: 1000/s, shards: auto}\n")
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), "ZADD") {
		t.Fatalf("reload adding shards: auto for a user without ZADD: %v; want it refused naming ZADD", err)
	}
	after := get(t, td.api+"/metrics").body
	for _, trace := range []string{`interval="77ms"`, `chunk="7"`} {
		if strings.Contains(after, trace) {
			t.Errorf("/metrics after the refused reload shows %s, of a rule never in force:\n%s", trace, grepLines(after, trace))
		}
	}

	write(base + added)
	if err := td.d.Reload(); err != nil {
		t.Fatalf("reload without the shards: auto rule: %v", err)
	}
	if r := td.d.engine().Rules().Rule("hard2"); r == nil {
		t.Fatal("after the good reload, rule hard2 is not in force")
	}

	// Interval 77ms retired, then brought back by a refused reload: its
	// series, of a Sync once in force, stays, as counters do.
	write(base)
	if err := td.d.Reload(); err != nil {
		t.Fatalf("reload dropping soft2 and hard2: %v", err)
	}
	write(base + added + "  - {name: hot, rate: 1000/s, shards: auto}\n")
	if err := td.d.Reload(); err == nil {
		t.Fatal("reload adding shards: auto for a user without ZADD: applied")
	}
	after = get(t, td.api+"/metrics").body
	for _, kept := range []string{`sluice_fleet_sync_batch_seconds_count{interval="77ms"}`, `sluice_fleet_lease_reserve_seconds_count{chunk="7"}`} {
		if !strings.Contains(after, kept) {
			t.Errorf("/metrics after a refused reload lost %s, of a decorator once in force:\n%s", kept, grepLines(after, "sluice_fleet_"))
		}
	}
}
