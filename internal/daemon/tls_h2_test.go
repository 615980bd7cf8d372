package daemon

import (
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestTLSHTTP2AndClientCARotation: the decision API and the proxy speak
// HTTP/2 over TLS (ALPN h2) and HTTP/1.1 to clients that offer only it;
// a client CA bundle replaced by a rename is used from the next
// handshake, and a client whose certificate the old CA signed is refused
// then, even when it resumes a TLS session made before.
func TestTLSHTTP2AndClientCARotation(t *testing.T) {
	srvCA := tlstest.NewCA(t, "server")
	oldCA, newCA := tlstest.NewCA(t, "old-clients"), tlstest.NewCA(t, "new-clients")
	oldClient := oldCA.Client(t, "gw", []string{"gw.test"})
	newClient := newCA.Client(t, "gw", []string{"gw.test"})
	srv := srvCA.Server(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	replace(t, caFile, read(t, oldCA.File))
	up := startUpstream(t)
	mtls := "{cert: " + srv.CertFile + ", key: " + srv.KeyFile + ", client_ca: " + caFile + ", client_sans: [gw.test]}"
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  tls: `+mtls+`
proxy:
  listen: 127.0.0.1:0
  upstream: `+up.url+`
  tls: `+mtls+`
rules:
  - name: all
    rate: 100/m
`)
	a := td.d.Addrs()
	client := func(h2 bool, sessions tls.ClientSessionCache, cert tlstest.Pair) *http.Client {
		cfg := srvCA.ClientConfig(cert.TLS)
		cfg.ClientSessionCache = sessions
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2, DisableKeepAlives: true}
		if !h2 {
			cfg.NextProtos = []string{"http/1.1"}
		}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	get := func(c *http.Client, url string) (*http.Response, string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	for _, h2 := range []bool{true, false} {
		want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		c := client(h2, nil, oldClient)
		if resp, _, err := get(c, "https://"+a.API+"/healthz"); err != nil || resp.StatusCode != 200 || resp.Proto != want {
			t.Errorf("GET /healthz over TLS (h2 offered: %v): %v %v, want 200 over %s", h2, resp, err, want)
		}
		if resp, body, err := get(c, "https://"+a.Proxy+"/"); err != nil || resp.StatusCode != 200 || resp.Proto != want || body != "upstream says hi" {
			t.Errorf("GET / on the proxy over TLS (h2 offered: %v): %v %q %v, want the upstream's 200 over %s", h2, resp, body, err, want)
		}
	}

	// A session to resume, checked to be resumed before the rotation.
	sessions := tls.NewLRUClientSessionCache(8)
	old := client(false, sessions, oldClient)
	for i := range 2 {
		resp, _, err := get(old, "https://"+a.API+"/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("the old CA's client before the rotation: %v %v, want 200", resp, err)
		}
		if i == 1 && !resp.TLS.DidResume {
			t.Fatal("the second connection did not resume the TLS session: the test would not test resumption")
		}
	}
	replace(t, caFile, read(t, newCA.File))
	waitFor(t, "the new CA's client accepted after the CA file's rotation", func() bool {
		resp, _, err := get(client(false, nil, newClient), "https://"+a.API+"/healthz")
		return err == nil && resp.StatusCode == 200
	})
	for name, c := range map[string]*http.Client{"resuming its session": old, "anew": client(false, nil, oldClient)} {
		if resp, _, err := get(c, "https://"+a.API+"/healthz"); err == nil {
			t.Errorf("the old CA's client %s after the rotation: %d (resumed %v), want refused", name, resp.StatusCode, resp.TLS.DidResume)
		}
	}
}
