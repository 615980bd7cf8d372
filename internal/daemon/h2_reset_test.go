package daemon

import (
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/h2test"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestHTTP2RapidReset (CVE-2023-44487): on the decision API and the
// proxy over TLS, a client that opens 10,000 HTTP/2 streams and resets
// each at once has its connection closed before the server has read them
// all (counted in sluice_connections_closed_resets_total), having spent
// little of a rule's quota, and other clients are served on.
func TestHTTP2RapidReset(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	pair := ca.Server(t)
	up := startUpstream(t)
	tlsBlock := "{cert: " + pair.CertFile + ", key: " + pair.KeyFile + "}"
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  tls: `+tlsBlock+`
proxy:
  listen: 127.0.0.1:0
  upstream: `+up.url+`
  tls: `+tlsBlock+`
rules:
  - name: all
    rate: 1000000/m
    key: [method]
`)
	a := td.d.Addrs()
	const n = 10_000
	for _, c := range []struct {
		listener, addr string
		fields         []string
		end            bool
	}{
		// A /v1/check whose body is to come, as the flood's requests do
		// not end their streams.
		{"api", a.API, []string{":method", "POST", ":scheme", "https", ":path", "/v1/check", ":authority", a.API, "content-type", "application/json"}, false},
		// A GET through the proxy: a decision, then the upstream.
		{"proxy", a.Proxy, []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", a.Proxy}, true},
	} {
		t.Run(c.listener, func(t *testing.T) {
			decided := td.metric("sluice_decisions_total", "rule", "all")
			fl := h2test.Dial(t, c.addr, ca.ClientConfig()).RapidReset(t, 1, n, c.end, c.fields...)
			spent := td.metric("sluice_decisions_total", "rule", "all") - decided
			t.Logf("%d streams sent, %v decisions; served after: %v, GOAWAY %v, %v", fl.Sent, spent, fl.Served, fl.GoAway, fl.Err)
			if fl.Served {
				t.Errorf("the %s listener read %d streams opened and reset at once (%v decisions) and still serves the connection; want it closed", c.listener, n, spent)
			}
			if spent > 1000 {
				t.Errorf("%v decisions for one connection's rapid resets, want at most 1000", spent)
			}
			if got := td.metric("sluice_connections_closed_resets_total", "listener", c.listener); got != 1 {
				t.Errorf("sluice_connections_closed_resets_total{listener=%q} = %v, want 1", c.listener, got)
			}
			tr := &http2.Transport{TLSClientConfig: ca.ClientConfig()}
			t.Cleanup(tr.CloseIdleConnections)
			path := map[string]string{"api": "/healthz", "proxy": "/"}[c.listener]
			resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Get("https://" + c.addr + path)
			if err != nil {
				t.Fatalf("another client after the rapid reset: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("another client after the rapid reset: %d %s, want 200", resp.StatusCode, b)
			}
		})
	}
}
