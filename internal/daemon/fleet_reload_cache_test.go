package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOverLimitCacheReloadRule: a key refused under a rule (and so held
// by the over-limit cache, and by the rule's sync view or lease) is
// decided afresh after a reload that changes the rule's window or
// algorithm (a new fingerprint: fresh keys, nothing cached refuses them),
// and is still refused after one that changes only its mode or interval:
// the count in Redis is the same, and a refusal Redis would make stays
// right.
func TestOverLimitCacheReloadRule(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	conf := func(rule string) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nstore:\n  type: redis\n  redis: {addrs: [%s], timeout: 2s}\nrules:\n  - name: r\n%s", rs.Addr, rule)
	}
	const before = "    rate: 3/h\n    algorithm: fixed_window\n    sync: 1m\n"
	for _, c := range []struct {
		name, after string
		allowed     int // of 5, after the reload
	}{
		// A day, not a minute: a minute's edge on Redis' clock between
		// the 5 requests after the reload frees the 3 again (the day's
		// edge is cleared above).
		{"window", "    rate: 3/d\n    algorithm: fixed_window\n    sync: 1m\n", 3},
		{"algorithm", "    rate: 3/h\n    algorithm: token_bucket\n    sync: 1m\n", 3},
		{"window and lease", "    rate: 3/d\n    algorithm: fixed_window\n    lease: auto\n", 3},
		{"interval", "    rate: 3/h\n    algorithm: fixed_window\n    sync: 30s\n", 0},
		{"mode", "    rate: 3/h\n    algorithm: fixed_window\n    lease: 2\n", 0},
		{"exact", "    rate: 3/h\n    algorithm: fixed_window\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := redistest.Do(rs.Addr, "FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			td := startDaemon(t, conf(before))
			if n := allowedOf(t, td.api, "r", "k", 6); n != 3 {
				t.Fatalf("before the reload: %d of 6 allowed, want 3", n)
			}
			if n := allowedOf(t, td.api, "r", "k", 3); n != 0 {
				t.Fatalf("before the reload, once refused: %d of 3 allowed, want 0", n)
			}
			replaceFile(t, td.path, conf(c.after))
			if r := td.waitReload(); r.Err != nil {
				t.Fatalf("reload: %v", r.Err)
			}
			if n := allowedOf(t, td.api, "r", "k", 5); n != c.allowed {
				t.Errorf("after the reload: %d of 5 allowed, want %d", n, c.allowed)
			}
		})
	}
}
