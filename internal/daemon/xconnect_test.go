package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/h2test"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestAPIExtendedConnect: an extended CONNECT (RFC 8441: a WebSocket
// over HTTP/2, a CONNECT with :protocol and a :path), which Go's HTTP/2
// server takes only under GODEBUG=http2xconnect=1, is answered 501 on
// the decision API over TLS, whatever its path and with the token too:
// the API tunnels nothing, and no handler sees it (forward auth took its
// method as the request's and decided on it, spending a rule's quota,
// and answered 200, which opens the tunnel). The connection goes on. The
// test runs itself again in a process with that GODEBUG, which the
// HTTP/2 server reads only at start.
func TestAPIExtendedConnect(t *testing.T) {
	if !strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1") {
		if testing.Short() {
			t.Skip("runs the test binary again")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestAPIExtendedConnect$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "GODEBUG=http2xconnect=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestAPIExtendedConnect")) {
			t.Fatalf("with GODEBUG=http2xconnect=1: %v\n%s", err, out)
		}
		return
	}
	ca := tlstest.NewCA(t, "server")
	pair := ca.Server(t)
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "tok\n")
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  tls: {cert: `+pair.CertFile+`, key: `+pair.KeyFile+`}
  token_file: `+token+`
rules:
  - name: all
    rate: 1000000/m
`)
	addr := td.d.Addrs().API
	c := h2test.Dial(t, addr, ca.ClientConfig())
	if v := c.Settings[http2.SettingEnableConnectProtocol]; v != 1 {
		t.Fatalf("server SETTINGS %v: ENABLE_CONNECT_PROTOCOL not advertised; the test does not test its case", c.Settings)
	}
	id := uint32(1)
	for _, path := range []string{"/v1/forward-auth", "/v1/check", "/v1/report", "/v1/rules", "/v1/hotkeys", "/v1/deferred/x", "/json", "/metrics", "/healthz", "/readyz", "/"} {
		for _, auth := range []string{"Bearer tok", ""} {
			fields := []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":path", path, ":authority", addr, "sec-websocket-version", "13", "x-forwarded-uri", "/chat"}
			if auth != "" {
				fields = append(fields, "authorization", auth)
			}
			decided := td.metric("sluice_decisions_total", "rule", "all")
			a := c.Request(t, id, false, fields...)
			id += 2
			if a.Status != "501" || !strings.Contains(a.Body, `"error":"extended_connect_unsupported`) {
				t.Errorf("extended CONNECT %s (token: %v): %+v, want 501 extended_connect_unsupported", path, auth != "", a)
			}
			if got := td.metric("sluice_decisions_total", "rule", "all") - decided; got != 0 {
				t.Errorf("extended CONNECT %s (token: %v): %v decisions, want none", path, auth != "", got)
			}
		}
	}
	if a := c.Request(t, id, true, ":method", "GET", ":scheme", "https", ":path", "/healthz", ":authority", addr); a.Status != "200" {
		t.Errorf("GET /healthz after the extended CONNECTs: %+v, want 200", a)
	}
}
