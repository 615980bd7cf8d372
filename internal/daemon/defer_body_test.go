package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A deferrable request whose body cannot be read whole is not queued (no
// half body in Redis), and is answered as the proxy answers such a body
// when it forwards it: a body that stalls past body_read_timeout 408, a
// malformed chunked body 400, the connection closed after the answer
// (what is left of the body cannot be framed). They used to be answered
// 429, on a connection kept open: a client told to retry later the
// request it never finished sending.
func TestDeferUnreadableBody(t *testing.T) {
	rs := redistest.StartServer(t)
	up := startUpstream(t)
	td := startDaemon(t, fmt.Sprintf(`listen: 127.0.0.1:0
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  body_read_timeout: 100ms
store:
  type: redis
  redis: {addrs: [%s]}
rules:
  - name: jobs
    match: {path: /jobs}
    rate: 1/h
    algorithm: token_bucket
    action: defer
`, up.url, rs.Addr))
	proxy := strings.TrimPrefix(td.proxy, "http://")
	if r := do(t, "POST", td.proxy+"/jobs", "first"); r.status != 200 {
		t.Fatalf("first request: %d %s, want 200 (under the limit)", r.status, r.body)
	}
	for _, tc := range []struct{ name, req, status, body string }{
		{"stalled", "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nthe first bytes, and then nothing",
			"HTTP/1.1 408 Request Timeout", `"request_timeout"`},
		{"malformed chunked", "POST /jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nmore\r\n0\r\n\r\n",
			"HTTP/1.1 400 Bad Request", `"bad_request"`},
	} {
		c := rawSend(t, proxy, tc.req)
		status, rest := readAnswer(t, c) // reads to the connection's close
		if status != tc.status || !strings.Contains(rest, tc.body) {
			t.Errorf("%s body of a deferrable request: %q %q; want %q with %s, and the connection closed", tc.name, status, rest, tc.status, tc.body)
		}
	}
	direct := directRedis(t, rs.Addr)
	if n, err := direct.Do(context.Background(), direct.B().Xlen().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("XLEN = %d, %v; want 0: no body read in part is queued", n, err)
	}
}
