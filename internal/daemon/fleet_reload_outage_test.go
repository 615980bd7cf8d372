package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSyncReloadDuringOutage: a reload that retires a sync interval while
// Redis cannot be reached keeps the hits that interval admitted and has
// not sent, and sends them, each once, when Redis answers again, as the
// batches of an interval still in use do. Closing the interval's Sync
// sent them once, failed, and dropped them: Redis never counted them, and
// the fleet could admit that many again.
func TestSyncReloadDuringOutage(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	gate := redistest.NewGate(t, rs.Addr)
	conf := func(iv string) string { return outageConf(gate.Addr, iv) }
	td := startDaemon(t, conf("1m"))
	fleetReloadDuringOutage(t, td, rs, gate, conf)
	gate.Open()
	waitFor(t, "the 3 hits admitted before the reload to reach Redis", func() bool { return sCount(t, rs, td) == "5" })
}

// TestSyncReloadDuringOutageShutdown: a daemon stopped while the hits of
// an interval a reload closed still wait for Redis tries them once more
// and stops; they are lost, as at any shutdown while Redis is down.
func TestSyncReloadDuringOutageShutdown(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	gate := redistest.NewGate(t, rs.Addr)
	td := startDaemon(t, outageConf(gate.Addr, "1m"))
	fleetReloadDuringOutage(t, td, rs, gate, func(iv string) string { return outageConf(gate.Addr, iv) })
	if err := td.stop(); err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	if got := sCount(t, rs, td); got != "2" {
		t.Errorf("Redis counts %s after the shutdown, want 2 (the 3 hits could not be sent)", got)
	}
}

// outageConf is the config of the outage tests: one sync rule on the
// interval iv, through addr.
func outageConf(addr, iv string) string {
	return fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 300ms}
rules:
  - name: s
    rate: 1000/h
    algorithm: fixed_window
    sync: %s
`, addr, iv)
}

// sCount is the count Redis holds for rule s's key k.
func sCount(t *testing.T, rs *redistest.Server, td *testDaemon) string {
	t.Helper()
	key := "sluice:{s|" + td.d.engine().Rules().Rule("s").Fingerprint + "|k}"
	v, err := redistest.Do(rs.Addr, "GET", key)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if f := strings.Fields(v); len(f) == 3 {
		return f[1]
	}
	return v
}

// fleetReloadDuringOutage admits 5 requests on rule s's key k (two decided
// in Redis, three pending until the 1m batch), cuts Redis off and reloads
// to another interval, which closes the 1m Sync.
func fleetReloadDuringOutage(t *testing.T, td *testDaemon, rs *redistest.Server, gate *redistest.Gate, conf func(string) string) {
	t.Helper()
	// The first two decided in Redis (cold, then the entry's first read),
	// three locally: not due before the 1m batch.
	if n := allowedOf(t, td.api, "s", "k", 5); n != 5 {
		t.Fatalf("%d of 5 allowed", n)
	}
	if got := sCount(t, rs, td); got != "2" {
		t.Fatalf("Redis counts %s before the reload, want 2", got)
	}
	gate.Shut()
	replaceFile(t, td.path, conf("30s")) // the same limit and key, another interval: the 1m Sync closes
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
}
