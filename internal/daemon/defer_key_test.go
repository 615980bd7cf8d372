package daemon

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request counted under several keys of a defer rule (a cookie sent
// twice: sid=a; sid=b) and denied by one of them is queued under the key
// that denied it (a), and its replay goes when every key of the request
// admits it, charging all or none. It used to be queued under the rule's
// last key (b): the replay asked b alone, which was fresh, and the
// upstream got the request at once although a's limit held it for a
// minute.
func TestDeferQueuedUnderDenyingKey(t *testing.T) {
	rs := redistest.StartServer(t)
	up := startUpstream(t)
	td := startDaemon(t, proxyConfig(up.url, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: jobs
    match: {path: /jobs}
    key: [cookie:sid]
    rate: 1/m
    algorithm: token_bucket
    action: defer
`, rs.Addr)))
	if r := do(t, http.MethodPost, td.proxy+"/jobs", "first", "Cookie", "sid=a"); r.status != http.StatusOK {
		t.Fatalf("sid=a: %d %s, want 200 (a's one request of the minute)", r.status, r.body)
	}
	if r := do(t, http.MethodPost, td.proxy+"/jobs", "second", "Cookie", "sid=a; sid=b"); r.status != http.StatusAccepted {
		t.Fatalf("sid=a; sid=b: %d %s, want 202 (a is spent: deferred)", r.status, r.body)
	}
	// The replay's first turn: denied (a holds it), or sent (a not asked).
	denied := func() float64 { return td.metric("sluice_decisions_total", "rule", "jobs", "result", "denied") }
	waitUntil(t, "the replay's first turn", func() bool { return up.count() > 1 || denied() > 1 })
	if n := up.count(); n != 1 {
		t.Fatalf("the upstream got %d requests within a's minute, want 1: the replay must wait for a", n)
	}
	rule := td.d.engine().Rules().Rule("jobs")
	direct := directRedis(t, rs.Addr)
	es, err := direct.Do(context.Background(), direct.B().Xrange().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(es) != 1 {
		t.Fatalf("XRANGE = %v, %v; want the deferred request, still queued", es, err)
	}
	if got, want := es[0].FieldValues["key"], rule.StoreKey("a"); got != want {
		t.Errorf("queued under key %q, want %q (a denied it; b is fresh)", got, want)
	}
	// All or none: the denied replay charged nothing to b.
	if a, status := check(t, td.api, "jobs", "b", 1); status != http.StatusOK || !a.Allowed {
		t.Errorf("POST /v1/check b after the replay was denied: %d %+v; want allowed (b not charged)", status, a)
	}
}
