package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLocalModeNotReady: under on_error: local, /readyz says ready only
// while the daemon decides on Redis. Once Redis answers again the daemon
// goes back to it at its next probe (every 500 ms); until then it still
// decides locally, and /readyz must not yet say ready: a load balancer
// sends it traffic on /readyz to count with the fleet. Each /readyz is
// read before the mode gauge, which only goes from local to Redis here,
// so a 200 followed by a gauge of 1 is a 200 given in local mode.
func TestLocalModeNotReady(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: local
rules:
  - name: r
    rate: 10/h
    algorithm: fixed_window
`, rs.Addr))
	rs.Stop()
	allowedOf(t, td.api, "r", "k", 1) // fails on Redis: local mode
	if v := td.metric("sluice_store_local"); v != 1 {
		t.Fatalf("sluice_store_local = %v after a failed call, want 1", v)
	}
	rs.Restart()
	ready := 0
	waitFor(t, "decisions back on Redis", func() bool {
		status := get(t, td.api+"/readyz").status
		local := td.metric("sluice_store_local")
		if status == http.StatusOK && local == 1 {
			t.Fatalf("GET /readyz answered 200 while the daemon still decided locally (sluice_store_local 1)")
		}
		if status == http.StatusOK {
			ready++
		}
		return local == 0 && ready > 0
	})
	if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
		t.Errorf("GET /readyz back on Redis: %d %q, want 200", r.status, r.body)
	}
}
