package harness

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// wrkOut is wrk 4.1.0's output (-t1 -c4 -d2s --latency --timeout 1s)
// against a server that answered every 50th request after 1.5 s and
// every 7th with 503: the 4 requests past the timeout are in its socket
// errors and not in its latency distribution (max 1.48 ms).
const wrkOut = `Running 2s test @ http://127.0.0.1:43329/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    83.85us  163.41us   1.48ms   96.17%
    Req/Sec     1.05k     1.29k    1.96k   100.00%
  Latency Distribution
     50%   43.00us
     75%   88.00us
     90%  138.00us
     99%    1.46ms
  396 requests in 2.03s, 46.56KB read
  Socket errors: connect 0, read 0, write 0, timeout 4
  Non-2xx or 3xx responses: 56
Requests/sec:    195.06
Transfer/sec:     22.94KB
`

// The figures of a clean run are read as wrk prints them.
func TestParseWrk(t *testing.T) {
	clean := strings.Replace(wrkOut, "  Socket errors: connect 0, read 0, write 0, timeout 4\n", "", 1)
	r, err := parseWrk([]byte(clean))
	if err != nil {
		t.Fatalf("parseWrk(clean run): %v", err)
	}
	want := WrkResult{RPS: 195.06, Requests: 396, Non2xx: 56, P50: 43 * time.Microsecond, P99: 1460 * time.Microsecond}
	if r.RPS != want.RPS || r.Requests != want.Requests || r.Non2xx != want.Non2xx || r.P50 != want.P50 || r.P99 != want.P99 {
		t.Fatalf("parseWrk(clean run) = %+v, want %+v", r, want)
	}
}

// Requests wrk gave up on (timeouts) or lost to a socket error are left
// out of its latency distribution and its request count: a step with any
// is not the latency it prints, and must fail rather than be reported.
func TestParseWrkSocketErrors(t *testing.T) {
	for _, line := range []string{
		"  Socket errors: connect 0, read 0, write 0, timeout 4\n",
		"  Socket errors: connect 0, read 3, write 0, timeout 0\n",
		"  Socket errors: connect 2, read 0, write 1, timeout 0\n",
	} {
		out := strings.Replace(wrkOut, "  Socket errors: connect 0, read 0, write 0, timeout 4\n", line, 1)
		if _, err := parseWrk([]byte(out)); !errors.Is(err, ErrWrkSocketErrors) {
			t.Errorf("parseWrk with %q: error %v, want ErrWrkSocketErrors (the failed requests are not in the latencies)", strings.TrimSpace(line), err)
		}
	}
}
