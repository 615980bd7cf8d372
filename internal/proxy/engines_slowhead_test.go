package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proxy"
)

// An answer whose head comes in pieces, the last one later than
// proxy.WatchClientAfter after the request, is relayed whole on every
// engine: response_header_timeout (a minute here) bounds the wait for the
// head, whether its first byte came at once or not. A 103 Early Hints
// sent at once, while the upstream is still working on its answer (what
// it is for), is such a head; so is a status line flushed before the
// header fields.
//
// The upstream sends the rest of the head once the proxy has passed its
// short wait: on the fast path (HTTP/1.x clients, no custom Transport),
// when it starts watching the client (proxy.SetTestHookWatching), which it
// does when the read deadline set at WatchClientAfter passes with the head
// not whole — no sleep past it by the clock. ReverseProxy (HTTP/2
// clients, a custom Transport) has no such short wait, only
// response_header_timeout: there the rest follows the first piece.
// Serial: the hook is the package's.
func TestEngineSlowHeadAfterFirstBytes(t *testing.T) {
	cases := []struct{ name, first, rest string }{
		{"103 Early Hints, then the answer", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate"},
		{"status line, then the header fields", "HTTP/1.1 200 OK\r\n", "Content-Length: 4\r\n\r\nlate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forEngine(t, false, func(t *testing.T, ec engineCase) {
				fast := !ec.h2 && !ec.rp
				watched := watchSignals(t)
				var sawWatch atomic.Bool
				addr := serveConns(t, func(conn net.Conn) {
					conn.SetDeadline(time.Now().Add(safety))
					br := bufio.NewReader(conn)
					for {
						r, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, r.Body)
						io.WriteString(conn, c.first)
						if fast {
							// The upstream at work, past the short wait:
							// the proxy watches its client then.
							select {
							case <-watched:
								sawWatch.Store(true)
							case <-time.After(safety): // a hang detector: the test fails below
							}
						}
						io.WriteString(conn, c.rest)
					}
				})
				s := startOn(t, ec, "http://"+addr, engineOpts{proxy: proxy.Options{ResponseHeaderTimeout: time.Minute}})
				resp, body := s.do(t, mustRequest(t, "GET", s.URL+"/slow"))
				if resp.StatusCode != http.StatusOK || body != "late" {
					t.Errorf("GET /slow: %d %q, want 200 \"late\" (response_header_timeout a minute)", resp.StatusCode, body)
				}
				if fast && !sawWatch.Load() {
					t.Errorf("the proxy never watched its client while it awaited the head: WatchClientAfter (%v) did not pass with the head in pieces", proxy.WatchClientAfter)
				}
			})
		})
	}
}
