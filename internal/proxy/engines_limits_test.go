package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/proxy"
)

// The upstream's response head (status line, header lines and the blank
// line) is bounded at DefaultMaxResponseHeaderBytes on every engine and
// both upstream paths, exactly: a head of that size passes, one byte more
// answers 502 bad_gateway.
func TestEngineResponseHeadBoundary(t *testing.T) {
	const max = proxy.DefaultMaxResponseHeaderBytes
	fixed := len("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Big: \r\n\r\n")
	up := scriptedUpstream(t, func(r *http.Request) string {
		var n int
		fmt.Sscanf(r.URL.Path, "/%d", &n)
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Big: " + strings.Repeat("a", n-fixed) + "\r\n\r\nok"
	})
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range paths {
			for _, c := range []struct {
				head   int
				status int
				body   string
			}{{max, 200, "ok"}, {max + 1, 502, "{\"error\":\"bad_gateway\"}\n"}, {max, 200, "ok"}} {
				resp, body := s.do(t, request(t, s, pa.method, fmt.Sprintf("/%d", c.head), pa.body))
				if resp.StatusCode != c.status || body != c.body {
					t.Errorf("%s: a response head of %d bytes: %d %q, want %d %q", pa.name, c.head, resp.StatusCode, body, c.status, c.body)
				}
			}
		}
	})
}

// A request head (request line, header lines and the blank line) over
// net/http's MaxHeaderBytes (1 MiB) and its 4 KiB of slack answers 431 on
// every HTTP/1.1 engine, exactly at that bound, and reaches no upstream.
func TestEngineRequestHeadBoundary(t *testing.T) {
	const max = http.DefaultMaxHeaderBytes + 4096
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		var hits atomic.Int64
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
		up.Config.MaxHeaderBytes = 4 << 20 // the proxy adds its X-Forwarded-*: the upstream must take them
		up.Start()
		t.Cleanup(up.Close)
		s := startOn(t, ec, up.URL, engineOpts{})
		for _, method := range []string{"GET", "POST"} {
			for _, c := range []struct{ head, status int }{{max, 200}, {max + 1, 431}} {
				pre := method + " / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Big: "
				conn := s.dial(t)
				go io.WriteString(conn, pre+strings.Repeat("a", c.head-len(pre)-4)+"\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil || resp.StatusCode != c.status {
					t.Errorf("%s with a head of %d bytes: %v %v, want %d", method, c.head, resp, err, c.status)
				}
				conn.Close()
			}
		}
		if n := hits.Load(); n != 2 {
			t.Errorf("the upstream got %d requests, want the 2 within the bound", n)
		}
	})
}

// Trailers (declared, or not) and 103 Early Hints reach the client on
// every engine and both upstream paths.
func TestEngineTrailersAndEarlyHints(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		switch r.URL.Path {
		case "/trailer":
			return "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n"
		case "/undeclared":
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n"
		}
		return "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
	})
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range paths {
			for _, path := range []string{"/trailer", "/undeclared", "/hints"} {
				var hints []string
				req := request(t, s, pa.method, path, pa.body)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
						hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
						return nil
					}}))
				resp, body := s.do(t, req)
				if resp.StatusCode != 200 || body != "abc" {
					t.Errorf("%s %s: %d %q, want 200 abc", pa.name, path, resp.StatusCode, body)
				}
				if path == "/hints" {
					if len(hints) != 1 || hints[0] != "103 </a.css>; rel=preload" {
						t.Errorf("%s %s: 1xx answers %q, want the upstream's 103", pa.name, path, hints)
					}
				} else if v := resp.Trailer.Get("X-Sum"); v != "42" {
					t.Errorf("%s %s: trailer X-Sum %q, want 42", pa.name, path, v)
				}
			}
		}
	})
}
