package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLocalStoreSwept: with on_error: local, the keys decided in memory
// while Redis was down are swept once at rest, as the memory store's are
// (every SweepInterval), and counted in sluice_store_local_keys. The local
// store was never swept: after an outage its keys stayed, up to the 4 Mi
// keys of memstore's default, for as long as the daemon ran.
func TestLocalStoreSwept(t *testing.T) {
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
    rate: 10/s
    algorithm: fixed_window
`, rs.Addr))
	rs.Stop()
	const n = 50
	for i := range n {
		allowedOf(t, td.api, "r", fmt.Sprint("k", i), 1)
	}
	if v := td.metric("sluice_store_local"); v != 1 {
		t.Fatalf("sluice_store_local = %v with Redis down, want 1", v)
	}
	if v := td.metric("sluice_store_local_keys"); v != n {
		t.Fatalf("sluice_store_local_keys = %v after %d keys decided locally, want %d", v, n, n)
	}
	rs.Restart()
	waitFor(t, "decisions back on Redis", func() bool { return td.metric("sluice_store_local") == 0 })
	if td.d.sweep == nil {
		t.Fatal("nothing sweeps the local store")
	}
	td.d.sweep(time.Now().Add(time.Hour)) // the timer's next tick, an hour on: every key at rest
	if v := td.metric("sluice_store_local_keys"); v != 0 {
		t.Errorf("sluice_store_local_keys = %v after a sweep with every key at rest, want 0", v)
	}
}
