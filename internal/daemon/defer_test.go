package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A deferred request whose enqueue ran in Redis but whose reply was lost,
// Redis then unreachable, is answered by `sluice serve` (not only by the
// proxy alone) 503 defer_outcome_unknown, with the id it is queued under if
// it is, no Location (see TestDeferredAnswerLocation), and no Retry-After or X-RateLimit-Retry-After
// (which would tell the client to send it again); the id names the
// request Redis queued.
func TestDeferOutcomeUnknownThroughDaemon(t *testing.T) {
	rs := redistest.StartServer(t)
	x := redistest.NewCutter(t, rs.Addr, "marked-body", true)
	td := startDeferDaemon(t, x.Addr)
	x.Arm()
	r := do(t, http.MethodPost, td.proxy+"/jobs", "marked-body")
	if !x.Cut() {
		t.Fatal("the cutter never saw the enqueue: the test proves nothing")
	}
	var a struct {
		Error string `json:"error"`
		Rule  string `json:"rule"`
		ID    string `json:"deferred_id"`
	}
	json.Unmarshal([]byte(r.body), &a)
	if r.status != http.StatusServiceUnavailable || a.Error != "defer_outcome_unknown" || a.Rule != "jobs" || a.ID == "" ||
		r.header.Values("Location") != nil || r.header.Values("Retry-After") != nil ||
		r.header.Values("X-RateLimit-Retry-After") != nil {
		t.Fatalf("enqueue's reply lost, Redis gone: %d %s (headers %v); "+
			"want 503 defer_outcome_unknown naming the rule and the id, no Location, no Retry-After nor X-RateLimit-Retry-After",
			r.status, r.body, r.header)
	}
	direct := directRedis(t, rs.Addr)
	q, err := deferq.New(deferq.Options{Client: direct})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := q.Status(context.Background(), a.ID); err != nil || st.State != "queued" || st.Rule != "jobs" {
		t.Errorf("Status(%s) = %+v, %v; want queued on jobs: the id answered must name the request Redis queued", a.ID, st, err)
	}
}

// The client answered 503 defer_outcome_unknown asks for its id on the
// decision API: while the enqueue is still on its way (held on a stuck path
// to Redis), 404; and once that enqueue lands, still 404, with nothing
// queued: the client told 404 sends the request again, and it is done
// once.
func TestDeferLocationAfterLateEnqueue(t *testing.T) {
	rs := redistest.StartServer(t)
	x := redistest.NewHolder(t, rs.Addr, "held-body")
	td := startDeferDaemon(t, x.Addr)
	x.Hold()
	r := do(t, http.MethodPost, td.proxy+"/jobs", "held-body")
	var a struct {
		Error string `json:"error"`
		ID    string `json:"deferred_id"`
	}
	json.Unmarshal([]byte(r.body), &a)
	loc := deferq.StatusPath + a.ID
	if r.status != http.StatusServiceUnavailable || a.Error != "defer_outcome_unknown" || a.ID == "" {
		x.Release()
		t.Fatalf("enqueue held: %d %s; want 503 defer_outcome_unknown with the id", r.status, r.body)
	}
	// As a client does, it asks again while the answer is 503 (Redis not
	// answering: the connection the held enqueue is stuck on may carry
	// the read too, until the daemon's client gives up on it).
	var st reply
	waitUntil(t, "an answer from Redis for "+loc, func() bool {
		st = get(t, td.api+loc)
		return st.status != http.StatusServiceUnavailable
	})
	if st.status != http.StatusNotFound {
		x.Release()
		t.Fatalf("GET %s with the enqueue held: %d %s; want 404", loc, st.status, st.body)
	}
	if n := x.Release(); n == 0 {
		t.Fatal("the holder held no enqueue: the test proves nothing")
	}
	if r := get(t, td.api+loc); r.status != http.StatusNotFound {
		t.Errorf("GET %s after the held enqueue landed: %d %s; want 404 still (the client was told it was not queued)", loc, r.status, r.body)
	}
	direct := directRedis(t, rs.Addr)
	if n, err := direct.Do(context.Background(), direct.B().Xlen().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Build()).AsInt64(); err != nil || n != 1 {
		t.Errorf("XLEN = %d, %v; want 1 (the warm-up only: the late enqueue queued nothing)", n, err)
	}
}

// startDeferDaemon starts a daemon proxying to an upstream with one rule,
// jobs (POST /jobs, 1/m, action defer), on the Redis at addr, and sends it
// two requests: the first passes, the second is deferred (loading the
// queue's scripts), so that the next one is deferred too.
func startDeferDaemon(t *testing.T, addr string) *testDaemon {
	t.Helper()
	up := startUpstream(t)
	td := startDaemon(t, proxyConfig(up.url, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: jobs
    match: {path: /jobs}
    rate: 1/m
    algorithm: token_bucket
    action: defer
`, addr)))
	if r := do(t, http.MethodPost, td.proxy+"/jobs", "first"); r.status != http.StatusOK {
		t.Fatalf("first request: %d %s, want 200 (under the limit)", r.status, r.body)
	}
	if r := do(t, http.MethodPost, td.proxy+"/jobs", "warm"); r.status != http.StatusAccepted { // loads the script
		t.Fatalf("second request: %d %s, want 202 (deferred)", r.status, r.body)
	}
	return td
}

// directRedis is a client of the Redis at addr of its own, beside the
// daemon's.
func directRedis(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A 202's answer sends its client nowhere wrong: the status of a deferred
// request is served on the decision API (listen), not on proxy.listen,
// where a path is the upstream's. The 202 used to carry Location:
// /v1/deferred/ID, which a client resolves against the proxy's address:
// following it reached the upstream. It carries no Location now; its body
// names the id, and the decision API answers for it.
func TestDeferredAnswerLocation(t *testing.T) {
	rs := redistest.StartServer(t)
	td := startDeferDaemon(t, rs.Addr)
	r := do(t, http.MethodPost, td.proxy+"/jobs", "third")
	var a struct {
		ID string `json:"deferred_id"`
	}
	if err := json.Unmarshal([]byte(r.body), &a); r.status != http.StatusAccepted || err != nil || a.ID == "" {
		t.Fatalf("over the limit: %d %q, want 202 with the deferred_id", r.status, r.body)
	}
	if loc := r.header.Get("Location"); loc != "" {
		// Where a client following it lands: the proxy's address.
		u, err := url.Parse(td.proxy)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := url.Parse(loc)
		if err != nil {
			t.Fatalf("Location %q: %v", loc, err)
		}
		got := get(t, u.ResolveReference(ref).String())
		t.Fatalf("202 with Location %q: a client following it gets %d %q from the proxy's address, not the request's status; want no Location", loc, got.status, got.body)
	}
	if st := get(t, td.api+deferq.StatusPath+a.ID); st.status != http.StatusOK || !strings.Contains(st.body, `"deferred_id":"`+a.ID+`"`) {
		t.Errorf("GET %s%s on the decision API: %d %q, want 200 with the request's status", deferq.StatusPath, a.ID, st.status, st.body)
	}
}
