package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// tlsDaemon runs a daemon whose decision API and gRPC listener both need
// mutual TLS (clients signed by ca, named gw.test) and whose /v1/* needs a
// bearer token, with certificates made for the test.
type tlsDaemon struct {
	*testDaemon
	ca        *tlstest.CA
	good, bad tlstest.Pair // allowed SAN; a SAN not allowed
	forged    tlstest.Pair // allowed SAN, signed by another CA
	tokenFile string
}

func startTLSDaemon(t *testing.T) *tlsDaemon {
	t.Helper()
	ca := tlstest.NewCA(t, "clients")
	srv := ca.Server(t)
	td := &tlsDaemon{ca: ca,
		good:   ca.Client(t, "gw", []string{"gw.test"}),
		bad:    ca.Client(t, "other", []string{"other.test"}),
		forged: tlstest.NewCA(t, "rogue").Client(t, "rogue-gw", []string{"gw.test"}),
	}
	dir := t.TempDir()
	td.tokenFile = filepath.Join(dir, "api-token")
	if err := os.WriteFile(td.tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	descs := filepath.Join(dir, "descriptors")
	os.Mkdir(descs, 0o755)
	os.WriteFile(filepath.Join(descs, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o644)
	tlsBlock := "{cert: " + srv.CertFile + ", key: " + srv.KeyFile + ", client_ca: " + ca.File + ", client_sans: [gw.test]}"
	conf := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(conf, []byte(`listen: 127.0.0.1:0
api:
  read_header_timeout: 200ms
  tls: `+tlsBlock+`
  token_file: api-token
grpc:
  listen: 127.0.0.1:0
  config: [descriptors]
  tls: `+tlsBlock+`
rules:
  - name: all
    rate: 5/m
`), 0o644)
	td.testDaemon = startDaemonFile(t, conf)
	return td
}

func (td *tlsDaemon) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: td.ca.ClientConfig(certs...)}, Timeout: 10 * time.Second}
}

func (td *tlsDaemon) url(path string) string { return "https://" + td.d.Addrs().API + path }

// post sends body to path with the bearer token tok ("" none).
func (td *tlsDaemon) post(c *http.Client, path, tok, body string) (*http.Response, string, error) {
	req, _ := http.NewRequest("POST", td.url(path), strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

func TestTLSAndToken(t *testing.T) {
	td := startTLSDaemon(t)
	const body = `{"rule":"all","key":"k"}`

	// mTLS: no certificate, a certificate of another CA, and one whose
	// name is not allowed are refused in the handshake.
	for name, certs := range map[string][]tls.Certificate{
		"no client certificate": nil,
		"another CA's":          {td.forged.TLS},
		"a SAN not in the list": {td.bad.TLS},
	} {
		if _, _, err := td.post(td.client(certs...), "/v1/check", "s3cret-token", body); err == nil {
			t.Errorf("HTTPS with %s: answered, want the handshake refused", name)
		}
	}
	// Plain HTTP on the TLS port is not served.
	if r, err := http.Post("http://"+td.d.Addrs().API+"/v1/check", "application/json", strings.NewReader(body)); err == nil && r.StatusCode == 200 {
		t.Error("plain HTTP on the TLS listener answered 200")
	}

	c := td.client(td.good.TLS)
	// The token: missing or wrong is 401 with a JSON error.
	for _, tok := range []string{"", "wrong", "s3cret-token-and-more", "s3cret-toke"} {
		resp, b, err := td.post(c, "/v1/check", tok, body)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		if resp.StatusCode != 401 || json.Unmarshal([]byte(b), &e) != nil || !strings.Contains(e.Error, "Bearer") || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %q: %d %q (WWW-Authenticate %q), want 401 with a JSON error naming the Bearer token", tok, resp.StatusCode, b, resp.Header.Get("WWW-Authenticate"))
		}
	}
	for _, path := range []string{"/v1/rules", "/v1/report", "/v1/forward-auth", "/json"} {
		if resp, _, err := td.post(c, path, "", body); err != nil || resp.StatusCode != 401 {
			t.Errorf("%s without the token: %v %v, want 401", path, resp.StatusCode, err)
		}
	}
	resp, b, err := td.post(c, "/v1/check", "s3cret-token", body)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(b, `"allowed":true`) {
		t.Fatalf("the right certificate and token: %v %q %v, want 200 allowed", resp.StatusCode, b, err)
	}
	// Probes and the scraper need no token.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		r, err := c.Get(td.url(path))
		if err != nil || r.StatusCode != 200 {
			t.Errorf("GET %s without a token: %v %v, want 200", path, r.StatusCode, err)
		}
		if r != nil {
			r.Body.Close()
		}
	}

	// gRPC: the same mTLS.
	ask := func(certs ...tls.Certificate) (*rlsv3.RateLimitResponse, error) {
		conn, err := grpc.NewClient(td.d.Addrs().GRPC, grpc.WithTransportCredentials(credentials.NewTLS(td.ca.ClientConfig(certs...))))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
	}
	for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "another CA's": {td.forged.TLS}, "a SAN not in the list": {td.bad.TLS}} {
		if _, err := ask(certs...); err == nil {
			t.Errorf("gRPC with %s: answered, want refused", name)
		}
	}
	if r, err := ask(td.good.TLS); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("gRPC with the right certificate: %v %v, want OK", r, err)
	}

	// A new token takes effect on reload; the old one is refused.
	if err := os.WriteFile(td.tokenFile, []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if resp, _, err := td.post(c, "/v1/check", "s3cret-token", body); err != nil || resp.StatusCode != 401 {
		t.Errorf("the old token after a reload: %v %v, want 401", resp.StatusCode, err)
	}
	if resp, _, err := td.post(c, "/v1/check", "rotated", body); err != nil || resp.StatusCode != 200 {
		t.Errorf("the new token after a reload: %v %v, want 200", resp.StatusCode, err)
	}
	// A renewed server certificate (the same paths) takes effect on
	// reload, on both listeners.
	served := func(addr string, next ...string) string {
		cfg := td.ca.ClientConfig(td.good.TLS)
		cfg.NextProtos = next
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	apiBefore, grpcBefore := served(td.d.Addrs().API), served(td.d.Addrs().GRPC, "h2")
	td.ca.Server(t) // rewrites server.pem and server-key.pem
	if err := td.d.Reload(); err != nil {
		t.Fatal(err)
	}
	if a, g := served(td.d.Addrs().API), served(td.d.Addrs().GRPC, "h2"); a == apiBefore || g == grpcBefore {
		t.Errorf("after a reload with a renewed certificate the listeners serve serials %s / %s, before %s / %s: want the new one", a, g, apiBefore, grpcBefore)
	}
	if r, err := ask(td.good.TLS); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("gRPC after the certificate's renewal: %v %v, want OK", r, err)
	}

	// An emptied token file is refused on reload, naming it; the token in
	// force stays.
	os.WriteFile(td.tokenFile, nil, 0o600)
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), td.tokenFile) {
		t.Errorf("reload with an empty token file: %v, want an error naming it", err)
	}
	if resp, _, err := td.post(c, "/v1/check", "rotated", body); err != nil || resp.StatusCode != 200 {
		t.Errorf("the token in force after a refused reload: %v %v, want 200", resp.StatusCode, err)
	}
}

// TestTLSHandshakeTimeout: a client that connects to the TLS listener and
// never sends its ClientHello is closed after read_header_timeout, and
// counted as slow, as on a plain listener.
func TestTLSHandshakeTimeout(t *testing.T) {
	td := startTLSDaemon(t)
	c, err := net.Dial("tcp", td.d.Addrs().API)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(safety))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent client on the TLS listener: read %v, want the daemon to close it (EOF)", err)
	}
	waitFor(t, "slow connection counted", func() bool {
		return td.metric("sluice_connections_closed_slow_total", "listener", "api") == 1
	})
}

// TestTLSHandshakeErrorsLogOnceASecond: at log_level debug (the test
// daemon's), net/http's line for each failed TLS handshake is written at
// most once a second, with how many went unlogged: each wrote one, so a
// client could make the daemon write a line per connection.
func TestTLSHandshakeErrorsLogOnceASecond(t *testing.T) {
	srv := tlstest.NewCA(t, "ca").Server(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\napi:\n  tls: {cert: "+srv.CertFile+", key: "+srv.KeyFile+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	td := startDaemonWith(t, path, func(o *Options) { o.Now = func() time.Time { return time.Unix(0, clock.Load()) } })
	bad := func() {
		t.Helper()
		c, err := net.Dial("tcp", td.d.Addrs().API)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(safety))
		io.WriteString(c, "not a TLS record, nor HTTP\r\n")
		// net/http logs the failed handshake, then closes the connection.
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("after a failed handshake: %v, want the daemon to close the connection", err)
		}
	}
	logtest.OncePerSecond(t, "failed handshakes", "TLS handshake error", 5, td.logs.Lines, bad, func() { clock.Add(int64(time.Second)) })
}
