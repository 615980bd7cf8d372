package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSyncHitsAcrossOutage: a sync rule's hits admitted on the instance
// and not yet sent when Redis becomes unreachable (its data kept: a
// network cut) reach Redis once it is reachable again, each once; the
// requests decided in local mode meanwhile (on_error: local) are not
// charged to Redis afterwards.
func TestSyncHitsAcrossOutage(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
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

// TestSentinelFailoverDaemon kills the master (SIGKILL) under a daemon
// configured with its Sentinel: the daemon answers per on_error meanwhile,
// follows the promotion without a restart (/readyz passes again), and the
// fleet rules carry on on the promoted replica without passing a limit:
// the counts the replica had stay, and a lease lets go of the units it
// held (the new master's run_id differs), so it admits at most the limit
// in all.
func TestSentinelFailoverDaemon(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinelFor(t, master, time.Second, []*redistest.Server{replica})
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], sentinel: mymaster, timeout: 2s}
  on_error: deny
rules:
  - name: exact
    rate: 4/h
    algorithm: fixed_window
  - name: lease
    rate: 10/h
    algorithm: fixed_window
    lease: 2
`, sentinel))
	exact := allowedOf(t, td.api, "exact", "k", 2)
	lease := allowedOf(t, td.api, "lease", "k", 2) // the second reserves 2: one held
	if exact != 2 || lease != 2 {
		t.Fatalf("before the failover: %d and %d of 2 allowed", exact, lease)
	}
	redistest.WaitReplicated(t, master, replica)
	master.Kill()
	waitFor(t, "decisions on the promoted replica", func() bool {
		a, status := check(t, td.api, "exact", "k", 1)
		if a.Allowed {
			exact++
		}
		return status == http.StatusOK
	})
	if got := get(t, td.api+"/readyz"); got.status != http.StatusOK {
		t.Errorf("GET /readyz after the failover: %d %q", got.status, got.body)
	}
	exact += allowedOf(t, td.api, "exact", "k", 4)
	if exact != 4 {
		t.Errorf("exact: %d admitted across the failover, want the limit 4 (the replica had the 2 before)", exact)
	}
	for range 12 {
		a, status := check(t, td.api, "lease", "k", 1)
		if status == http.StatusOK && a.Allowed {
			lease++
		}
	}
	if lease > 10 || lease < 9 {
		t.Errorf("lease: %d admitted across the failover, want at most the limit 10, at least 9 (the unit held may be dropped)", lease)
	}
	t.Logf("across the failover: exact %d of 4, lease %d of 10 admitted", exact, lease)
	if got, err := redistest.Do(replica.Addr, "ROLE"); err != nil || !strings.HasPrefix(got, "master") {
		t.Errorf("ROLE of the replica = %q, %v; want master", got, err)
	}
}
