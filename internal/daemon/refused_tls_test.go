package daemon

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestMaxConnectionsRefusedTLS: under api.tls and proxy.tls (mutual TLS
// here), a connection beyond max_connections gets its handshake, its
// client certificate checked, and then 503 {"error":"overloaded"}, over
// HTTP/1.1 or HTTP/2 as ALPN chose, and is counted refused: a gateway
// takes a failed handshake, as a close, for Sluice down, which its
// fail-open config lets through.
func TestMaxConnectionsRefusedTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	pair := ca.Server(t)
	clients := tlstest.NewCA(t, "clients")
	gw := clients.Client(t, "gw", []string{"gw.example"})
	tlsBlock := "{cert: " + pair.CertFile + ", key: " + pair.KeyFile + ", client_ca: " + clients.File + ", client_sans: [gw.example]}"
	up := startUpstream(t)
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  max_connections: 1
  read_header_timeout: 1h
  tls: `+tlsBlock+`
proxy:
  listen: 127.0.0.1:0
  upstream: `+up.url+`
  max_connections: 1
  read_header_timeout: 1h
  tls: `+tlsBlock+`
`)
	a := td.d.Addrs()
	for _, c := range []struct{ listener, addr, path string }{{"api", a.API, "/healthz"}, {"proxy", a.Proxy, "/"}} {
		t.Run(c.listener, func(t *testing.T) {
			// The one place is held by a connection whose handshake never
			// starts.
			held, err := net.Dial("tcp", c.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			waitFor(t, "the held connection taken", func() bool { return td.metric("sluice_connections_open", "listener", c.listener) == 1 })
			h1 := ca.ClientConfig(gw.TLS)
			h1.NextProtos = []string{"http/1.1"}
			h2 := &http2.Transport{TLSClientConfig: ca.ClientConfig(gw.TLS)}
			t.Cleanup(h2.CloseIdleConnections)
			for _, rt := range []struct {
				proto int
				http.RoundTripper
			}{{1, &http.Transport{TLSClientConfig: h1, DisableKeepAlives: true}}, {2, h2}} {
				req, _ := http.NewRequest("GET", "https://"+c.addr+c.path, nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatalf("HTTP/%d over max_connections: %v, want a 503", rt.proto, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `{"error":"overloaded"}`) || resp.ProtoMajor != rt.proto {
					t.Errorf("HTTP/%d over max_connections: %s %d %q, want 503 {\"error\":\"overloaded\"} over HTTP/%d", rt.proto, resp.Proto, resp.StatusCode, b, rt.proto)
				}
			}
			// Without a client certificate, the handshake is refused as on
			// a connection served.
			req, _ := http.NewRequest("GET", "https://"+c.addr+c.path, nil)
			if resp, err := (&http.Transport{TLSClientConfig: ca.ClientConfig(), DisableKeepAlives: true}).RoundTrip(req); err == nil {
				resp.Body.Close()
				t.Errorf("no client certificate, over max_connections: %d, want the handshake refused", resp.StatusCode)
			}
			if got := td.metric("sluice_connections_refused_total", "listener", c.listener); got != 3 {
				t.Errorf("sluice_connections_refused_total = %v, want 3", got)
			}
		})
	}
}
