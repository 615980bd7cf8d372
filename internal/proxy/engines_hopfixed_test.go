package proxy_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// The fixed hop-by-hop headers stop at the proxy both ways on every
// HTTP/1.1 engine and both paths: a client's Proxy-Connection,
// Keep-Alive, Trailer (of a request without trailers), an Upgrade that
// Connection does not name (no upgrade asked for), TE but for its
// trailers (the one value the upstream is told: the proxy relays
// trailers); an answer's Proxy-Connection, Keep-Alive, Upgrade (of an
// answer that is no 101), Proxy-Authenticate and TE.
func TestEngineFixedHopByHopHeaders(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		var seen []string
		for _, k := range []string{"Proxy-Connection", "Keep-Alive", "Trailer", "Upgrade", "Te"} {
			if v, ok := r.Header[k]; ok {
				seen = append(seen, fmt.Sprintf("%s=%q", k, v))
			}
		}
		return "HTTP/1.1 200 OK\r\nProxy-Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nUpgrade: h2c\r\n" +
			"Proxy-Authenticate: Basic\r\nTe: trailers\r\nX-Seen: " + strings.Join(seen, " ") + "\r\nContent-Length: 2\r\n\r\nok"
	})
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range paths {
			for _, c := range []struct{ te, seen string }{
				{"trailers, deflate;q=0.5", `Te=["trailers"]`},
				{"gzip", ""},
			} {
				conn := s.dial(t)
				fmt.Fprintf(conn, "%s /x HTTP/1.1\r\nHost: app.example\r\nProxy-Connection: keep-alive\r\nKeep-Alive: 300\r\nTrailer: X-Sum\r\n"+
					"Upgrade: websocket\r\nTE: %s\r\nContent-Length: %d\r\n\r\n%s", pa.method, c.te, len(pa.body), pa.body)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s, TE %s: %v %v, want 200", pa.name, c.te, resp, err)
				}
				if got := resp.Header.Get("X-Seen"); got != c.seen {
					t.Errorf("%s, TE %s: the upstream got %s, want %q", pa.name, c.te, got, c.seen)
				}
				for _, k := range []string{"Proxy-Connection", "Keep-Alive", "Upgrade", "Proxy-Authenticate", "Te"} {
					if v, ok := resp.Header[k]; ok {
						t.Errorf("%s: the client got the upstream's %s %q", pa.name, k, v)
					}
				}
				conn.Close()
			}
		}
	})
}

// A 101 Switching Protocols reaches the client with Upgrade and
// Connection: Upgrade, which the switch needs, and without the upstream's
// other hop-by-hop headers (those its Connection names, Keep-Alive,
// Proxy-Connection), on every HTTP/1.1 engine; the tunnel then works.
func TestEngineUpgradeAnswerHopHeaders(t *testing.T) {
	up := "http://" + serveConns(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade, X-Foo\r\nX-Foo: 1\r\nKeep-Alive: timeout=5\r\n"+
			"Proxy-Connection: x\r\nUpgrade: echo\r\nX-Bar: kept\r\n\r\n")
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprint(c, "echo: "+line)
		}
	})
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		c, br, resp := upgrade(t, s, "echo")
		if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "echo" || resp.Header.Get("Connection") != "Upgrade" || resp.Header.Get("X-Bar") != "kept" {
			t.Fatalf("upgrade: %d %v, want 101 with Upgrade: echo, Connection: Upgrade and X-Bar", resp.StatusCode, resp.Header)
		}
		for _, k := range []string{"X-Foo", "Keep-Alive", "Proxy-Connection"} {
			if v, ok := resp.Header[k]; ok {
				t.Errorf("the client got the 101's %s %q", k, v)
			}
		}
		echoes(t, c, br, "ping\n", "pong\n")
	})
}
