package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestDeferChargesOtherRules: a request a defer rule queues must pass
// every other enforcing rule it matches, as an admitted one does; the
// defer rule only shifts it in time. It charged none of them (a request
// another rule refuses charges nothing, and the replay asks the defer rule
// alone), so a per-IP limit of 2/h let through 5 requests of one IP, 3 of
// them deferred past it.
func TestDeferChargesOtherRules(t *testing.T) {
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
`
	cfg := proxyConfig(up.url, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: per-ip
    rate: 2/h
    algorithm: fixed_window
    key: [ip]
    action: reject
%s`, rs.Addr, jobs))
	td := startDaemon(t, cfg)

	// 1: both rules allow. 2: jobs refuses (defer), per-ip has room: it is
	// charged and the request queued. 3-7: per-ip refuses: its 429.
	want := []int{200, 202, 429, 429, 429, 429, 429}
	var got []int
	for range want {
		r := do(t, http.MethodPost, td.proxy+"/jobs", "job")
		got = append(got, r.status)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v (a deferred request charges per-ip; once per-ip is spent, its 429)", got, want)
	}
	if got := td.metric("sluice_deferred_enqueued_total", "rule", "jobs", "result", "queued"); got != 1 {
		t.Errorf("queued %v, want 1", got)
	}

	// jobs put back at 100/h: a new worker replays the queue at once; the
	// replay asks jobs alone, per-ip having been charged when queued.
	replaceFile(t, td.path, strings.Replace(cfg, jobs, "", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload without jobs: %v", r.Err)
	}
	replaceFile(t, td.path, strings.Replace(cfg, "rate: 1/h\n    algorithm: token_bucket", "rate: 100/h\n    algorithm: token_bucket", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload with jobs at 100/h: %v", r.Err)
	}
	waitUntil(t, "the deferred request replayed", func() bool { return up.count() >= 2 })
	if n := up.count(); n != 2 {
		t.Fatalf("the upstream got %d requests from the one IP, want 2 (per-ip is 2/h)", n)
	}
	if r := do(t, http.MethodPost, td.proxy+"/jobs", "job"); r.status != http.StatusTooManyRequests {
		t.Errorf("after the replay: %d %s, want 429 (per-ip spent)", r.status, r.body)
	}
}
