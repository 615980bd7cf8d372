package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/rules"
)

// echoUpstream switches to "echo" on Upgrade: echo (else answers 403
// "no upgrade"), then echoes lines until either side closes; hung up is
// closed when its tunnel ends, and a line "bye" makes it close its side.
type echoUpstream struct {
	srv      *httptest.Server
	upgrades atomic.Int64
	plain    atomic.Int64
	ended    chan struct{}
}

func newEchoUpstream(t *testing.T) *echoUpstream {
	u := &echoUpstream{ended: make(chan struct{}, 16)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			u.plain.Add(1)
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "no upgrade")
			return
		}
		u.upgrades.Add(1)
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer func() { conn.Close(); u.ended <- struct{}{} }()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil || line == "bye\n" {
				return
			}
			brw.WriteString("echo: " + line)
			brw.Flush()
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

const upgradeReq = "GET /ws HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n"

// upgrade sends an upgrade request on a new raw connection and reads the
// answer's head.
func upgrade(t *testing.T, s *eserved, proto string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c := s.dial(t)
	fmt.Fprintf(c, upgradeReq, proto)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("answer to the upgrade: %v", err)
	}
	return c, br, resp
}

func echoes(t *testing.T, c net.Conn, br *bufio.Reader, msgs ...string) {
	t.Helper()
	for _, msg := range msgs {
		io.WriteString(c, msg)
		if got, err := br.ReadString('\n'); err != nil || got != "echo: "+msg {
			t.Fatalf("through the tunnel: sent %q, got %q %v", msg, got, err)
		}
	}
}

// Upgrades on every HTTP/1.1 engine: bytes pass both ways; a close from
// either side ends the other; an upgrade the upstream refuses is an
// ordinary answer and the connection goes on as HTTP; an upgrade a rule
// denies gets 429 and no tunnel (what the client sends next is read as
// HTTP, not passed on).
func TestEngineUpgrade(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		t.Run("client closes", func(t *testing.T) {
			up := newEchoUpstream(t)
			s := startOn(t, ec, up.srv.URL, engineOpts{})
			c, br, resp := upgrade(t, s, "echo")
			if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "echo" || resp.Header.Get("X-RateLimit-Limit") != "1000" {
				t.Fatalf("upgrade: %d %v, want 101 Upgrade: echo with the rule's headers", resp.StatusCode, resp.Header)
			}
			echoes(t, c, br, "ping\n", "pong\n")
			c.Close()
			waitFor(t, up.ended, "the upstream's side of the tunnel to end after the client closed")
		})
		t.Run("upstream closes", func(t *testing.T) {
			up := newEchoUpstream(t)
			s := startOn(t, ec, up.srv.URL, engineOpts{})
			c, br, resp := upgrade(t, s, "echo")
			if resp.StatusCode != 101 {
				t.Fatalf("upgrade: %d, want 101", resp.StatusCode)
			}
			echoes(t, c, br, "ping\n")
			io.WriteString(c, "bye\n")
			if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
				t.Errorf("after the upstream closed: %q %v, want EOF", b, err)
			}
		})
		t.Run("upstream refuses", func(t *testing.T) {
			up := newEchoUpstream(t)
			s := startOn(t, ec, up.srv.URL, engineOpts{})
			c, br, resp := upgrade(t, s, "other")
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 403 || string(b) != "no upgrade" {
				t.Fatalf("refused upgrade: %d %q, want the upstream's 403", resp.StatusCode, b)
			}
			io.WriteString(c, "GET /next HTTP/1.1\r\nHost: app.example\r\n\r\n")
			next, err := http.ReadResponse(br, nil)
			if err != nil || next.StatusCode != 403 {
				t.Fatalf("next request on the connection: %v %v, want the upstream's answer", next, err)
			}
			if up.plain.Load() != 2 || up.upgrades.Load() != 0 {
				t.Errorf("upstream: %d plain requests, %d upgrades; want 2, 0", up.plain.Load(), up.upgrades.Load())
			}
		})
		t.Run("rule denies", func(t *testing.T) {
			up := newEchoUpstream(t)
			s := startOn(t, ec, up.srv.URL, engineOpts{specs: []rules.Spec{{Name: "ws", Rate: "1/m"}}})
			c, br, resp := upgrade(t, s, "echo")
			if resp.StatusCode != 101 {
				t.Fatalf("first upgrade: %d, want 101", resp.StatusCode)
			}
			c.Close()
			c, br, resp = upgrade(t, s, "echo")
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 429 || resp.Header.Get("Upgrade") != "" {
				t.Fatalf("upgrade over the limit: %d %v %q, want 429 without Upgrade", resp.StatusCode, resp.Header, b)
			}
			// Bytes meant for a tunnel: read as HTTP (refused), not passed on.
			io.WriteString(c, "ping\n\n")
			if next, err := http.ReadResponse(br, nil); err == nil && next.StatusCode != 400 {
				t.Errorf("bytes after the refused upgrade answered %d, want 400 or the connection closed", next.StatusCode)
			}
			if up.upgrades.Load() != 1 || up.plain.Load() != 0 {
				t.Errorf("upstream: %d upgrades, %d plain requests; want 1, 0", up.upgrades.Load(), up.plain.Load())
			}
		})
	})
}

// max_connections counts an upgraded connection while its tunnel is open
// (one more connection is closed at once, unserved) and gives its slot
// back when the tunnel ends, on every HTTP/1.1 engine.
func TestEngineUpgradeSlotGivenBack(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		up := newEchoUpstream(t)
		s := startOn(t, ec, up.srv.URL, engineOpts{lis: listener.Options{MaxConnections: 1}})
		for round := range 3 {
			c, br, resp := upgrade(t, s, "echo")
			if resp.StatusCode != 101 {
				t.Fatalf("round %d: upgrade %d, want 101 (the slot of the last tunnel given back)", round, resp.StatusCode)
			}
			echoes(t, c, br, "ping\n")
			// A second connection while the tunnel is open: closed unserved.
			extra, err := net.Dial("tcp", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(extra, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if b, _ := io.ReadAll(extra); len(b) != 0 {
				t.Errorf("round %d: a connection over max_connections got %q, want it closed unserved", round, b)
			}
			extra.Close()
			if round%2 == 0 {
				c.Close()
			} else {
				io.WriteString(c, "bye\n")
				if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
					t.Errorf("round %d: after the upstream closed: %q %v, want EOF", round, b, err)
				}
				c.Close()
			}
			waitFor(t, up.ended, "the tunnel to end")
			waitOpen(t, s.ln, 0)
		}
	})
}

// waitOpen waits until ln holds n connections (a close is counted out
// after the proxy's side of the tunnel ends, which the client cannot
// see), failing after safety.
func waitOpen(t *testing.T, ln *listener.Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for ln.Open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("listener holds %d connections, want %d", ln.Open(), n)
		}
		runtime.Gosched()
	}
}
