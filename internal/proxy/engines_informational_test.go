package proxy_test

import (
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// 1xx answers (100 Continue, 103 Early Hints) before the final one are
// bounded on every engine and both upstream paths: up to
// proxy.MaxInformational of them, their headers together within
// DefaultMaxResponseHeaderBytes, are relayed and the final answer follows;
// one more, or headers past that budget, or an upstream that sends them
// without end (5 MB of them here), answer 502 bad_gateway, logged as an
// upstream failure, and no more than MaxInformational reach the client.
func TestEngineInformationalBound(t *testing.T) {
	const n = proxy.MaxInformational
	hint := "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
	big := func(size int) string {
		return "HTTP/1.1 103 Early Hints\r\nX-Big: " + strings.Repeat("a", size) + "\r\n\r\n"
	}
	const max = proxy.DefaultMaxResponseHeaderBytes
	final := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	up := scriptedUpstream(t, func(r *http.Request) string {
		switch r.URL.Path {
		case "/at-bound":
			return "HTTP/1.1 100 Continue\r\n\r\n" + strings.Repeat(hint, n-1) + final
		case "/over":
			return "HTTP/1.1 100 Continue\r\n\r\n" + strings.Repeat(hint, n) + final
		case "/bytes-within":
			return big(max/4) + big(max/4) + final
		case "/bytes-over":
			return big(max/2) + big(max/2) + final
		}
		return strings.Repeat(hint, 100_000) // as good as without end: 5 MB of them, never a final answer
	})
	cases := []struct {
		path   string
		status int
		body   string
		hints  int // 1xx answers the client gets, at most
	}{
		{"/at-bound", 200, "ok", n},
		{"/over", 502, "{\"error\":\"bad_gateway\"}\n", n},
		{"/bytes-within", 200, "ok", 2},
		{"/bytes-over", 502, "{\"error\":\"bad_gateway\"}\n", 1},
		{"/endless", 502, "{\"error\":\"bad_gateway\"}\n", n},
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		var out redistest.SyncBuffer
		var tick atomic.Int64 // a second a log line: each failure is logged
		t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
		o := engineOpts{proxy: proxy.Options{Logger: slog.New(slog.NewTextHandler(&out, nil)),
			Now: func() time.Time { return t0.Add(time.Duration(tick.Add(1)) * time.Second) }}}
		s := startOn(t, ec, up, o)
		failures := 0
		for _, pa := range paths {
			for _, c := range cases {
				var hints atomic.Int64
				req := request(t, s, pa.method, c.path, pa.body)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					Got1xxResponse: func(int, textproto.MIMEHeader) error { hints.Add(1); return nil }}))
				resp, body := s.do(t, req)
				s.wantProto(t, resp)
				if resp.StatusCode != c.status || body != c.body {
					t.Errorf("%s %s: %d %q, want %d %q", pa.name, c.path, resp.StatusCode, body, c.status, c.body)
				}
				if h := hints.Load(); h > int64(c.hints) || c.status == 200 && h != int64(c.hints) {
					t.Errorf("%s %s: the client got %d 1xx answers, want %s%d", pa.name, c.path, h,
						map[bool]string{true: "", false: "at most "}[c.status == 200], c.hints)
				}
				if c.status == 502 {
					failures++
				}
			}
		}
		got := 0
		for _, l := range out.Lines() {
			if strings.Contains(l, "msg=upstream") && strings.Contains(l, "1xx") {
				got++
			}
		}
		if got != failures {
			t.Errorf("%d upstream lines about 1xx answers, want one per 502 (%d): %.500q", got, failures, out.Lines())
		}
	})
}
