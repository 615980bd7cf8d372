package listener_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
)

// A request whose framing another hop may have read another way (HTTP/1.1
// chunked, which may have come with a Content-Length net/http drops
// unseen; HTTP/1.0 keep-alive, whose Transfer-Encoding net/http ignores
// unseen) is answered and its connection closed, whatever the handler
// wrote (nothing, a 1xx first, a flush first), so the bytes after it are
// never read as a request (request smuggling). Others keep the
// connection. This is the listener of the decision API and the proxy.
func TestDoubtfulFramingCloses(t *testing.T) {
	const next = "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
	handlers := map[string]http.HandlerFunc{
		"writes":         func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); io.WriteString(w, "ok") },
		"writes nothing": func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) },
		"1xx first, cleared": func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			clear(w.Header()) // as httputil.ReverseProxy after a 1xx
			w.WriteHeader(http.StatusOK)
		},
		"flushes first": func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			http.NewResponseController(w).Flush()
			io.WriteString(w, "ok")
		},
	}
	cases := []struct {
		name, raw string
		closed    bool
	}{
		{"Content-Length and chunked", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true},
		{"chunked", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true},
		{"HTTP/1.0 keep-alive with chunked", "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true},
		{"HTTP/1.0 keep-alive", "GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
		{"Content-Length", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", false},
		{"no body", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", false},
	}
	for hname, h := range handlers {
		t.Run(hname, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv, wl := listener.Server(ln, h, listener.Options{Name: "api", BodyReadTimeout: time.Minute})
			go srv.Serve(wl)
			t.Cleanup(func() { srv.Close() })
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					conn, err := net.Dial("tcp", ln.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					conn.SetDeadline(time.Now().Add(time.Minute))
					io.WriteString(conn, c.raw+next)
					br := bufio.NewReader(conn)
					resp, err := http.ReadResponse(br, nil)
					for err == nil && resp.StatusCode < 200 {
						resp, err = http.ReadResponse(br, nil)
					}
					if err != nil || resp.StatusCode != 200 {
						t.Fatalf("answer: %v %v, want 200", resp, err)
					}
					io.ReadAll(resp.Body)
					more, err := http.ReadResponse(br, nil)
					if c.closed && err == nil {
						t.Errorf("a second answer (%d), want the connection closed after the first", more.StatusCode)
					} else if !c.closed && err != nil {
						t.Errorf("no answer to the next request (%v), want the connection kept", err)
					}
				})
			}
		})
	}
}
