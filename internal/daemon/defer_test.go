package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A deferred request whose enqueue ran in Redis but whose reply was lost,
// Redis then unreachable, is answered by `sluice serve` (not only by the
// proxy alone) 503 defer_outcome_unknown, with the id it is queued under if
// it is, that id's Location, and no Retry-After or X-RateLimit-Retry-After
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
		r.header.Get("Location") != deferq.StatusPath+a.ID || r.header.Values("Retry-After") != nil ||
		r.header.Values("X-RateLimit-Retry-After") != nil {
		t.Fatalf("enqueue's reply lost, Redis gone: %d %s (headers %v); "+
			"want 503 defer_outcome_unknown naming the rule and the id, its Location, no Retry-After nor X-RateLimit-Retry-After",
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

// The client answered 503 defer_outcome_unknown follows its Location on the
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
	loc := r.header.Get("Location")
	if r.status != http.StatusServiceUnavailable || a.Error != "defer_outcome_unknown" || loc != deferq.StatusPath+a.ID {
		x.Release()
		t.Fatalf("enqueue held: %d %s (Location %q); want 503 defer_outcome_unknown with its Location", r.status, r.body, loc)
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
