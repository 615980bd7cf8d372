package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSyncHitsAcrossOutage: a sync rule's hits admitted on the instance
// and not yet sent when Redis becomes unreachable (its data kept: a
// network cut) reach Redis once it is reachable again, each once; the
// requests decided in local mode meanwhile (on_error: local) are not
// charged to Redis afterwards.
func TestSyncHitsAcrossOutage(t *testing.T) {
	rs := redistest.StartServer(t)
	gate := redistest.NewGate(t, rs.Addr)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: local
  expected_instances: 2
rules:
  - name: s
    rate: 1000/h
    algorithm: fixed_window
    sync: 20ms
`, gate.Addr))
	key := "sluice:{s|" + td.d.engine().Rules().Rule("s").Fingerprint + "|k}"
	counted := func() string {
		v, err := redistest.Do(rs.Addr, "GET", key)
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		if f := strings.Fields(v); len(f) == 3 {
			return f[1]
		}
		return v
	}
	admitted := allowedOf(t, td.api, "s", "k", 30)
	gate.Shut()
	// Decided on the instance's view for up to two intervals, then in
	// local mode.
	waitFor(t, "local mode", func() bool {
		admitted += allowedOf(t, td.api, "s", "k", 1)
		return td.metric("sluice_store_local") == 1
	})
	local := td.metric("sluice_store_local_decisions_total")
	admitted += allowedOf(t, td.api, "s", "k", 10)
	if got := td.metric("sluice_store_local_decisions_total"); got != local+10 {
		t.Fatalf("sluice_store_local_decisions_total = %v after 10 more in local mode, want %v", got, local+10)
	}
	local += 10
	gate.Open()
	waitFor(t, "decisions back on Redis", func() bool { return td.metric("sluice_store_local") == 0 })
	want := fmt.Sprint(admitted - int(local))
	waitFor(t, "the hits not sent before the cut to reach Redis", func() bool { return counted() == want })
	// Two batches more: nothing is sent again.
	b := td.metric("sluice_fleet_sync_batches_total")
	waitFor(t, "two more batches", func() bool {
		allowedOf(t, td.api, "s", "other", 1) // a key in use keeps batches coming
		return td.metric("sluice_fleet_sync_batches_total") >= b+2
	})
	if got := counted(); got != want {
		t.Fatalf("Redis counts %s, want %s: the %d admitted less the %v decided in local mode, each once", got, want, admitted, local)
	}
}
