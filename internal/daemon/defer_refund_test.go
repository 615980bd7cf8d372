package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestDeferFullQueueGivesBack: a request a defer rule would queue charges
// the other enforcing rules it matches first; when the queue then refuses
// it (full), those charges are given back: the per-IP count is as before
// the request. Kept, a client whose requests a full queue turned away
// spent its per-IP allowance on requests nobody served.
func TestDeferFullQueueGivesBack(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	up := startUpstream(t)
	cfg := proxyConfig(up.url, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: per-ip
    rate: 3/h
    algorithm: fixed_window
    key: [ip]
    action: reject
  - name: jobs
    match: {path: /jobs}
    rate: 1/h
    algorithm: token_bucket
    action: defer
    defer: {max_queue: 1}
`, rs.Addr))
	td := startDaemon(t, cfg)

	// 1: both allow (per-ip 1 of 3). 2: jobs refuses, per-ip charged (2),
	// queued. 3: jobs refuses, per-ip charged (3), the queue is full:
	// 429, and per-ip is given back its unit (2).
	want := []int{200, 202, 429}
	var got []int
	for range want {
		r := do(t, http.MethodPost, td.proxy+"/jobs", "job")
		got = append(got, r.status)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	// per-ip has one unit left: a request jobs does not match passes, the
	// next is refused.
	if r := do(t, http.MethodGet, td.proxy+"/other", ""); r.status != http.StatusOK {
		t.Fatalf("GET /other after the full queue turned a request away: %d %s, want 200 (per-ip given back its charge)", r.status, r.body)
	}
	if r := do(t, http.MethodGet, td.proxy+"/other", ""); r.status != http.StatusTooManyRequests {
		t.Fatalf("GET /other, per-ip spent: %d %s, want 429", r.status, r.body)
	}
}
