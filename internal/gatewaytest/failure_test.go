package gatewaytest

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// stuckSluice takes connections and never answers them: a Sluice that
// hangs (paused, swapping, its machine overloaded). It returns its
// address.
func stuckSluice(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// With a Sluice that never answers, the gateway gives up after its
// timeout and fails closed, or open where its config says so, as it does
// with Sluice down: it does not hold the client's request forever.
func TestGatewayWithSluiceStuck(t *testing.T) {
	forFailModes(t, func(t *testing.T, k kind, open bool) {
		t.Parallel() // each waits out its gateway's timeout
		a := startApp(t)
		g := k.start(t, stuckSluice(t), a.addr(), variant{failOpen: open})
		addr := strings.TrimPrefix(g.url, "http://")
		r := sendRaw(t, "127.0.0.1", addr, "GET / HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
		switch {
		case open && (r.status != http.StatusOK || r.body != "app\n"):
			t.Errorf("with Sluice stuck: got %v, want 200 from the app", r)
		case !open && r.status != k.stuck:
			t.Errorf("with Sluice stuck: got %v, want %d", r, k.stuck)
		}
		want := int64(0)
		if open {
			want = 1
		}
		if got := a.hits.Load(); got != want {
			t.Errorf("the app saw %d requests, want %d", got, want)
		}
	})
}

// With Sluice's store down under on_error: deny, Sluice answers 503, and
// the gateway passes it on (nginx answers its own 503, Caddy passes
// Sluice's), in the fail-open variant too: that fails open only when
// Sluice gives no answer, so on_error decides what a store failure does.
func TestGatewayWithStoreDown(t *testing.T) {
	forFailModes(t, func(t *testing.T, k kind, open bool) {
		rd := redistest.StartServer(t)
		a := startApp(t)
		s := startSluice(t, sluiceYAML(t, k.sluice, rd.Addr))
		g := k.start(t, s.addr, a.addr(), variant{failOpen: open})
		c := client("127.0.0.1")
		wantAllowed(t, "with Redis up", send(t, c, "GET", g.url+"/", nil), 2)
		rd.Stop()
		if r := send(t, c, "GET", g.url+"/", nil); r.status != http.StatusServiceUnavailable {
			t.Errorf("with Redis down: got %v, want 503", r)
		}
		if got := a.hits.Load(); got != 1 {
			t.Errorf("the app saw %d requests, want 1", got)
		}
	})
}

// A gateway connection over Sluice's api.max_connections is answered 503
// {"error":"overloaded"}, which the gateway passes on (Caddy) or answers
// with its own 503 (nginx), in the fail-open variants too: it is Sluice's
// answer, not Sluice down, so clients that fill the cap get nothing past
// the limit (docs/http.md: size max_connections for all the gateways
// together; TestGatewayFullConnectionCapStaysLimited). So too when the
// gateway asks Sluice over TLS (api.tls): the connection's handshake is
// done, then answered (Caddy chooses HTTP/2 by ALPN, nginx HTTP/1.1).
func TestGatewayOverSluiceConnectionCap(t *testing.T) {
	forFailModes(t, func(t *testing.T, k kind, open bool) {
		for _, overTLS := range []bool{false, true} {
			t.Run(map[bool]string{false: "plaintext", true: "tls"}[overTLS], func(t *testing.T) {
				a := startApp(t)
				api := "api:\n  max_connections: 1\n"
				var v variant
				var ca *tlstest.CA
				if overTLS {
					ca = tlstest.NewCA(t, "sluice")
					pair := ca.Server(t)
					api += "  tls: {cert: " + pair.CertFile + ", key: " + pair.KeyFile + "}\n"
					v.tlsCA = ca.File
				}
				y := replace(t, sluiceYAML(t, k.sluice, ""), "listen: 127.0.0.1:8080\n", "listen: 127.0.0.1:8080\n"+api)
				s := startSluice(t, y)
				// Another client holds the one connection Sluice takes
				// (answered once, so Sluice has taken it).
				c, err := net.Dial("tcp", s.addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				if overTLS {
					c = tls.Client(c, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
				}
				if r := roundTrip(t, c, "GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n"); r.status != http.StatusOK {
					t.Fatalf("GET /healthz: got %v, want 200", r)
				}
				v.failOpen = open
				g := k.start(t, s.addr, a.addr(), v)
				r := send(t, client("127.0.0.1"), "GET", g.url+"/", nil)
				want := `{"error":"overloaded"}` // Sluice's, passed on
				if k.name == "nginx" {
					want = `{"error":"rate_limiter_unavailable"}` // auth_request keeps no body
				}
				if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, want) {
					t.Errorf("with Sluice at its connection cap: got %v, want 503 %s", r, want)
				}
				// So too a request with a long head (24 KiB of headers,
				// which the gateway passes on to Sluice; less than
				// nginx's 4 buffers of 8 KiB take).
				long := map[string]string{}
				rnd := rand.New(rand.NewPCG(1, 2))
				for i := range 4 {
					b := make([]byte, 4608) // 6 KiB in base64, which HTTP/2's Huffman codes shrink little
					for j := range b {
						b[j] = byte(rnd.Uint32())
					}
					long[fmt.Sprintf("X-Pad-%d", i)] = base64.StdEncoding.EncodeToString(b)
				}
				r = send(t, client("127.0.0.1"), "GET", g.url+"/", long)
				if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, want) {
					t.Errorf("a request with 24 KiB of headers, with Sluice at its connection cap: got %v, want 503 %s", r, want)
				}
				if got := a.hits.Load(); got != 0 {
					t.Errorf("with Sluice at its connection cap: the app saw %d requests, want none", got)
				}
			})
		}
	})
}

// The fail-open variant lets nothing through that Sluice refused, even
// with forward_auth.deny_status left at its default, 429 (which nginx's
// auth_request cannot pass on, and turns into a 500 like Sluice down).
func TestGatewayFailOpenKeepsSluiceRefusals(t *testing.T) {
	for _, k := range kinds {
		if !k.canFailOpen {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			y := sluiceYAML(t, k.sluice, "")
			if strings.Contains(y, "deny_status: 403") {
				y = replace(t, y, "deny_status: 403", "deny_status: 429")
			}
			s := startSluice(t, y)
			g := k.start(t, s.addr, a.addr(), variant{failOpen: true})
			c := client("127.0.0.70")
			for i := range 3 {
				if r := send(t, c, "GET", g.url+"/", nil); r.status != http.StatusOK {
					t.Fatalf("request %d: got %v, want 200", i+1, r)
				}
			}
			if r := send(t, c, "GET", g.url+"/", nil); r.status == http.StatusOK {
				t.Errorf("request 4, past the limit: got %v, want a refusal", r)
			}
			if got := a.hits.Load(); got != 3 {
				t.Errorf("the app saw %d requests, want 3", got)
			}
		})
	}
}

// The fail-open variant sends a request to the app unlimited only when
// Sluice failed: an app that fails (closes the connection without an
// answer) gets the request once, not a second time through the fail-open
// path, and the client gets the gateway's error.
func TestGatewayFailOpenDoesNotReplayAppFailures(t *testing.T) {
	for _, k := range kinds {
		if !k.canFailOpen {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			var hits atomic.Int64
			broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				c, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				c.Close()
			}))
			t.Cleanup(broken.Close)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, broken.Listener.Addr().String(), variant{failOpen: true})
			r := sendBody(t, client("127.0.0.90"), g.url+"/orders", []byte(`{"item":1}`))
			if r.status != http.StatusBadGateway {
				t.Errorf("POST /orders to an app that fails: got %v, want 502", r)
			}
			if got := hits.Load(); got != 1 {
				t.Errorf("the app got the POST %d times, want once", got)
			}
		})
	}
}

// forFailModes runs f for each gateway failing closed and, where its
// config offers it, failing open, as subtests named KIND/closed and
// KIND/open.
func forFailModes(t *testing.T, f func(t *testing.T, k kind, open bool)) {
	for _, k := range kinds {
		for _, open := range []bool{false, true} {
			if open && !k.canFailOpen {
				continue
			}
			name := k.name + "/closed"
			if open {
				name = k.name + "/open"
			}
			t.Run(name, func(t *testing.T) { f(t, k, open) })
		}
	}
}
