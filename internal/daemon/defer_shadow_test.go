package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestDeferChargesShadowOnce: a request a defer rule queues is served
// later, so a shadow rule it matched is charged by it as by an admitted
// request: once, when it is queued (its verdict counted then), and not
// again at its replay. Since a request another rule refuses charges no
// shadow rule, a deferred one charged none, neither queued nor replayed,
// and the shadow rule under-reported what it would refuse once enforced.
func TestDeferChargesShadowOnce(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	up := startUpstream(t)
	const jobs = `
  - name: jobs
    match: {path: /jobs}
    rate: 1/h
    algorithm: token_bucket
    action: defer
    defer: {max_body_bytes: 64}
`
	cfg := proxyConfig(up.url, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: trial
    rate: 10/h
    algorithm: fixed_window
    action: shadow
%s`, rs.Addr, jobs))
	td := startDaemon(t, cfg)
	// trial's counter, read at cost 0 (which counts a verdict of its own).
	remaining := func() int64 {
		t.Helper()
		e := td.d.engine()
		ms, err := e.Match(httptest.NewRequest(http.MethodGet, "/other", nil), netip.MustParseAddr("127.0.0.1"), nil)
		if err != nil || len(ms) != 1 || ms[0].Rule.Name != "trial" {
			t.Fatalf("Match /other: %v, %v; want trial alone", ms, err)
		}
		return e.Check(context.Background(), ms[0].Rule, ms[0].Key, 0).Decision.Remaining
	}

	if r := do(t, http.MethodPost, td.proxy+"/jobs", "first"); r.status != http.StatusOK {
		t.Fatalf("first: %d %s, want 200 (jobs' one request of the hour)", r.status, r.body)
	}
	for i := range 3 {
		if r := do(t, http.MethodPost, td.proxy+"/jobs", "deferred"); r.status != http.StatusAccepted {
			t.Fatalf("deferred %d: %d %s, want 202", i, r.status, r.body)
		}
	}
	// Deferrable but not queued (its body over the cap): refused, and
	// charges nothing.
	if r := do(t, http.MethodPost, td.proxy+"/jobs", strings.Repeat("x", 65)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over max_body_bytes: %d %s, want 413", r.status, r.body)
	}
	if got := td.metric("sluice_decisions_total", "rule", "trial", "result", "allowed"); got != 5 {
		t.Errorf("trial's allowed verdicts = %v, want 5 (each request counted once)", got)
	}
	if n := remaining(); n != 6 {
		t.Errorf("trial after 1 admitted, 3 deferred and 1 refused request: %d remaining, want 6 (charged by each served one, once)", n)
	}

	// jobs taken out (its worker lets go of the queue, held for the hour
	// jobs' limit asks) and put back with a higher limit: its counter
	// starts fresh, and a new worker replays the queue at once. trial,
	// unchanged, keeps its counter.
	replaceFile(t, td.path, strings.Replace(cfg, jobs, "", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload without jobs: %v", r.Err)
	}
	replaceFile(t, td.path, strings.Replace(cfg, "rate: 1/h\n    algorithm: token_bucket", "rate: 100/h\n    algorithm: token_bucket", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload with jobs at 100/h: %v", r.Err)
	}
	waitUntil(t, "the 3 deferred requests replayed", func() bool { return up.count() >= 4 })
	if n := up.count(); n != 4 {
		t.Fatalf("the upstream got %d requests, want 4", n)
	}
	if n := remaining(); n != 6 {
		t.Errorf("trial after the 3 deferred requests were replayed: %d remaining, want 6 (not charged again)", n)
	}
	if got := td.metric("sluice_decisions_total", "rule", "trial", "result", "allowed"); got != 7 {
		t.Errorf("trial's allowed verdicts after the replay = %v, want 7 (5 requests, 2 reads of the counter; none at the replay)", got)
	}
}
