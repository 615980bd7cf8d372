package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rules"
)

// laxH2C is an upstream that switches to "HTTP/2" whenever a request's
// Upgrade names h2c, without the checks RFC 7540 §3.2 asks for (Connection
// naming HTTP2-Settings, exactly one HTTP2-Settings), and echoes the
// request's Upgrade in its 101, as lax servers do. What comes through the
// upgraded connection it reads as requests (HTTP/1.1 text stands in for
// HTTP/2 frames: either way the proxy sees only bytes) and answers each.
type laxH2C struct {
	srv      *httptest.Server
	mu       sync.Mutex
	plain    []*http.Request // answered as HTTP/1.1
	bodies   []string        // their bodies
	tunneled []string        // paths of the requests read through a tunnel
}

func newLaxH2C(t *testing.T) *laxH2C {
	t.Helper()
	u := &laxH2C{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.plain = append(u.plain, r.Clone(r.Context()))
		u.bodies = append(u.bodies, string(body))
		u.mu.Unlock()
		if !namesH2C(r.Header["Upgrade"]) {
			io.WriteString(w, "plain "+r.URL.Path)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
		brw.Flush()
		for {
			req, err := http.ReadRequest(brw.Reader)
			if err != nil {
				return
			}
			u.mu.Lock()
			u.tunneled = append(u.tunneled, req.URL.Path)
			u.mu.Unlock()
			const msg = "through the tunnel"
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n" + msg)
			brw.Flush()
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// namesH2C reports whether an Upgrade value names h2c, in any case.
func namesH2C(vv []string) bool {
	for _, v := range vv {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "h2c") {
				return true
			}
		}
	}
	return false
}

// An h2c upgrade is not passed on (as Envoy and nginx do by default): the
// request reaches the upstream as plain HTTP/1.1 without Upgrade: h2c or
// HTTP2-Settings, so the upstream cannot switch the connection to HTTP/2,
// and what the client sends next on that connection is read, counted and
// limited by Sluice, not tunnelled past it to the upstream ("h2c
// smuggling"). WebSocket named beside h2c still passes. Run on the fast
// path and on ReverseProxy alike.
func TestH2CUpgradeNotForwarded(t *testing.T) {
	const settings = "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
	cases := []struct {
		name        string
		method      string
		head        string // header lines besides Host
		body        string
		wantUpgrade string // the upstream's Upgrade header
	}{
		{name: "h2c", method: "GET",
			head: "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n" + settings},
		{name: "h2c with a body", method: "POST", body: "hello",
			head: "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n" + settings},
		{name: "H2C, HTTP2-Settings not named in Connection", method: "GET",
			head: "Connection: Upgrade\r\nUpgrade: H2C\r\n" + settings},
		{name: "websocket, h2c list", method: "GET", wantUpgrade: "websocket",
			head: "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: websocket, h2c\r\n" + settings},
		{name: "h2c and websocket on two lines", method: "GET", wantUpgrade: "websocket",
			head: "Connection: Upgrade\r\nUpgrade: h2c\r\nUpgrade: websocket\r\n" + settings},
		{name: "h2 and HTTP/2.0", method: "GET",
			head: "Connection: Upgrade\r\nUpgrade: h2, HTTP/2.0\r\n"},
		{name: "HTTP2-Settings without Upgrade", method: "GET", head: settings},
	}
	engines := []struct {
		name      string
		transport http.RoundTripper
	}{
		{"fast path or ReverseProxy", nil},
		{"ReverseProxy only", &http.Transport{}},
	}
	for _, eng := range engines {
		for _, c := range cases {
			t.Run(eng.name+"/"+c.name, func(t *testing.T) {
				up := newLaxH2C(t)
				f := start(t, setup{specs: []rules.Spec{{Name: "per-ip", Rate: "1/m"}},
					up: &upstream{srv: up.srv}, transport: eng.transport})
				conn, err := net.Dial("tcp", f.proxy.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				// A guard against a hang only; nothing waits on it.
				conn.SetDeadline(time.Now().Add(time.Minute))
				br := bufio.NewReader(conn)

				req := c.method + " /first HTTP/1.1\r\nHost: app.example\r\n" + c.head
				if c.body != "" {
					req += "Content-Length: 5\r\n"
				}
				io.WriteString(conn, req+"\r\n"+c.body)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response to the upgrade request: %v", err)
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || string(b) != "plain /first" {
					t.Errorf("response to the upgrade request: %d %q, want 200 \"plain /first\" (not 101: no switch)", resp.StatusCode, b)
				}

				// Whatever comes next on the connection is Sluice's to
				// read: over the limit of 1/m, each is refused.
				for i := range 3 {
					io.WriteString(conn, "GET /smuggled HTTP/1.1\r\nHost: app.example\r\n\r\n")
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("request %d after the upgrade request: %v", i, err)
					}
					b, _ := io.ReadAll(resp.Body)
					if resp.StatusCode != 429 {
						t.Errorf("request %d after the upgrade request: %d %q, want 429 (counted by Sluice)", i, resp.StatusCode, b)
					}
				}

				up.mu.Lock()
				defer up.mu.Unlock()
				if len(up.tunneled) != 0 {
					t.Errorf("the upstream read %d requests through an upgraded connection, unseen by Sluice: %q", len(up.tunneled), up.tunneled)
				}
				if len(up.plain) != 1 {
					t.Fatalf("the upstream got %d plain requests, want 1", len(up.plain))
				}
				got := up.plain[0]
				if u := strings.Join(got.Header["Upgrade"], ", "); u != c.wantUpgrade || namesH2C(got.Header["Upgrade"]) {
					t.Errorf("the upstream's Upgrade: %q, want %q", u, c.wantUpgrade)
				}
				if s, ok := got.Header["Http2-Settings"]; ok {
					t.Errorf("the upstream's HTTP2-Settings: %q, want none", s)
				}
				if got.Method != c.method || up.bodies[0] != c.body {
					t.Errorf("the upstream's request: %s with body %q, want %s with %q", got.Method, up.bodies[0], c.method, c.body)
				}
			})
		}
	}
}
