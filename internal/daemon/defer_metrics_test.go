package daemon

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestDeferredMetricsTruth: the deferral metrics against what happened,
// on a real daemon, Redis and upstream. The 202s and the 429s of a full
// queue are the enqueued{queued} and {full} counts; the queue length is
// what Redis holds; each replay's outcome at the upstream (2xx, 4xx,
// a 503 then a 200, a 500 every time) is a delivery of its class, a
// retry, or a dead letter, and the dead letters are the dead-letter
// stream's length.
func TestDeferredMetricsTruth(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	var mu sync.Mutex
	answered := map[string]int{} // the upstream's answers to replays, by status class or status
	seen := map[string]bool{}    // Idempotency-Keys answered 503 once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusCreated
		switch {
		case strings.HasPrefix(r.URL.Path, "/flow/bad"):
			code = http.StatusBadRequest
		case strings.HasPrefix(r.URL.Path, "/flow/fail"):
			code = http.StatusInternalServerError
		case strings.HasPrefix(r.URL.Path, "/flow/retry"):
			mu.Lock()
			if k := r.Header.Get("Idempotency-Key"); k != "" && !seen[k] {
				seen[k] = true
				code = http.StatusServiceUnavailable
			}
			mu.Unlock()
		}
		if r.Header.Get("Sluice-Deferred-Id") != "" {
			mu.Lock()
			answered[strconv.Itoa(code)]++
			mu.Unlock()
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(up.Close)
	td := startDaemon(t, proxyConfig(up.URL, fmt.Sprintf(`store:
  type: redis
  redis: {addrs: [%s], timeout: 5s}
defer: {max_attempts: 2, backoff: 10ms, max_backoff: 10ms}
rules:
  - name: held
    match: {path: /held/*}
    rate: 1/h
    algorithm: fixed_window
    action: defer
    defer: {max_queue: 3}
  - name: flow
    match: {path: /flow/*}
    rate: 5/s
    burst: 1
    algorithm: token_bucket
    action: defer
`, rs.Addr)))

	// held: 1 passes, 3 are queued, 2 find the queue full; at 1/h the 3
	// stay queued.
	status := map[int]int{}
	for i := range 6 {
		status[do(t, http.MethodPost, td.proxy+"/held/"+strconv.Itoa(i), "x").status]++
	}
	if status[http.StatusCreated] != 1 || status[http.StatusAccepted] != 3 || status[http.StatusTooManyRequests] != 2 {
		t.Fatalf("held: answers %v, want 1 201, 3 202, 2 429", status)
	}
	for result, want := range map[string]float64{"queued": 3, "full": 2, "unknown": 0, "busy": 0} {
		if got := td.metric("sluice_deferred_enqueued_total", "rule", "held", "result", result); got != want {
			t.Errorf("sluice_deferred_enqueued_total{rule=held,result=%s} = %v, want %v", result, got, want)
		}
	}
	if got := td.metric("sluice_deferred_queue_length", "rule", "held"); got != 3 {
		t.Errorf("sluice_deferred_queue_length{rule=held} = %v, want the 3 queued", got)
	}
	if n := xlen(t, rs.Addr, "held", "q"); n != 3 {
		t.Errorf("Redis holds %d requests of held, want 3", n)
	}

	// flow (5/s, a burst of 1): 12 requests, 3 each to /flow/ok,
	// /flow/bad, /flow/retry and /flow/fail; those refused are queued
	// (202) and replayed at the rate. Those that pass at once are not
	// counted: what was deferred is what the 202s say.
	deferred := map[string]int{}
	for i := range 12 {
		path := []string{"ok", "bad", "retry", "fail"}[i%4]
		switch r := do(t, http.MethodPost, td.proxy+"/flow/"+path+"/"+strconv.Itoa(i), "x"); r.status {
		case http.StatusAccepted:
			deferred[path]++
		case http.StatusCreated, http.StatusBadRequest, http.StatusServiceUnavailable, http.StatusInternalServerError:
		default:
			t.Fatalf("flow request %d: %d %q", i, r.status, r.body)
		}
	}
	total := deferred["ok"] + deferred["bad"] + deferred["retry"] + deferred["fail"]
	if total < 8 {
		t.Fatalf("flow: %d of 12 requests deferred, want most (5/s with a burst of 1)", total)
	}
	waitFor(t, "flow's queue settled", func() bool {
		return xlen(t, rs.Addr, "flow", "q") == 0 &&
			td.metric("sluice_deferred_deliveries_total", "rule", "flow")+td.metric("sluice_deferred_dead_letters_total", "rule", "flow") == float64(total)
	})
	mu.Lock()
	defer mu.Unlock()
	// The upstream answered the replays of ok 201, of bad 400, of retry
	// 503 then 201, of fail 500 twice (max_attempts 2).
	want := map[string]int{"201": deferred["ok"] + deferred["retry"], "400": deferred["bad"], "503": deferred["retry"], "500": 2 * deferred["fail"]}
	for code, n := range want {
		if answered[code] != n {
			t.Fatalf("the upstream answered the replays %v, want %v (deferred: %v)", answered, want, deferred)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_deferred_enqueued_total", []string{"result", "queued"}, float64(total)},
		{"sluice_deferred_deliveries_total", []string{"status", "2xx"}, float64(answered["201"])},
		{"sluice_deferred_deliveries_total", []string{"status", "4xx"}, float64(answered["400"])},
		{"sluice_deferred_deliveries_total", []string{"status", "5xx"}, 0},
		// A failed attempt with one left is a retry: the 503s, and the
		// first 500 of each fail.
		{"sluice_deferred_retries_total", nil, float64(answered["503"] + answered["500"]/2)},
		{"sluice_deferred_dead_letters_total", nil, float64(xlen(t, rs.Addr, "flow", "dead"))},
		{"sluice_deferred_dead_letters_total", nil, float64(deferred["fail"])},
		{"sluice_deferred_queue_length", nil, 0},
	} {
		if got := td.metric(c.name, append([]string{"rule", "flow"}, c.labels...)...); got != c.want {
			t.Errorf("%s{rule=flow %v} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// xlen returns the length of the stream suffix ("q", "dead") of the
// defer rule named rule, under the default key prefix.
func xlen(t *testing.T, addr, rule, suffix string) int {
	t.Helper()
	v, err := redistest.Do(addr, "XLEN", "sluice:defer:{"+deferq.Tag(rule)+"}:"+suffix)
	if err != nil {
		t.Fatalf("XLEN: %v", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("XLEN: %q", v)
	}
	return n
}
