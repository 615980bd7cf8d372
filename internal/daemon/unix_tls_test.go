package daemon

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/socktest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// unixTLSDaemon runs a daemon whose decision API and gRPC listener are
// Unix sockets serving mutual TLS (clients signed by ca, named gw.test),
// with the server certificate and key at certFile and keyFile.
type unixTLSDaemon struct {
	*testDaemon
	ca                *tlstest.CA // the clients'
	good, bad         tlstest.Pair
	api, grpcSock     string
	serverCA          *tlstest.CA
	certFile, keyFile string
}

func startUnixTLSDaemon(t *testing.T) *unixTLSDaemon {
	t.Helper()
	dir := t.TempDir()
	sockets := socktest.Dir(t)
	ud := &unixTLSDaemon{ca: tlstest.NewCA(t, "clients"), serverCA: tlstest.NewCA(t, "server"),
		api: filepath.Join(sockets, "api.sock"), grpcSock: filepath.Join(sockets, "grpc.sock"),
		certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	ud.good = ud.ca.Client(t, "gw", []string{"gw.test"})
	ud.bad = ud.ca.Client(t, "other", []string{"other.test"})
	srv := ud.serverCA.Server(t)
	replace(t, ud.certFile, read(t, srv.CertFile))
	replace(t, ud.keyFile, read(t, srv.KeyFile))
	descs := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(descs, []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mtls := "{cert: " + ud.certFile + ", key: " + ud.keyFile + ", client_ca: " + ud.ca.File + ", client_sans: [gw.test]}"
	conf := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(conf, []byte(`listen: unix:`+ud.api+`
api:
  tls: `+mtls+`
grpc:
  listen: unix:`+ud.grpcSock+`
  config: [`+descs+`]
  tls: `+mtls+`
client_ip: {trusted_proxies: [unix:]}
rules:
  - {name: per-ip, key: [ip], rate: 1/h}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ud.testDaemon = startDaemonFile(t, conf)
	return ud
}

// client is an HTTPS client over the decision API's socket that trusts
// the server's CA and presents certs; HTTP/2 when the server offers it.
func (ud *unixTLSDaemon) client(certs ...tls.Certificate) *http.Client {
	cfg := ud.serverCA.ClientConfig(certs...)
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   cfg,
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", ud.api)
		},
	}}
}

// rls asks the gRPC listener, over its socket with TLS presenting certs,
// for user u of domain edge.
func (ud *unixTLSDaemon) rls(t *testing.T, u string, certs ...tls.Certificate) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+ud.grpcSock, grpc.WithTransportCredentials(credentials.NewTLS(ud.serverCA.ClientConfig(certs...))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: u}}}}})
}

// TLS on Unix sockets: the decision API (checks, forward auth, /metrics)
// and the Envoy service answer clients whose certificate the client CA
// signed with an allowed name, over HTTP/2; a client without a
// certificate, or with a name not allowed, is refused in the handshake,
// and plain HTTP on the socket is never served (no fast path around TLS).
func TestUnixTLS(t *testing.T) {
	ud := startUnixTLSDaemon(t)
	if got := ud.d.Addrs().API; got != "unix:"+ud.api {
		t.Errorf("Addrs().API = %q, want unix:%s", got, ud.api)
	}
	c := ud.client(ud.good.TLS)
	get := func(path string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://sluice"+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, b := get("/healthz"); resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Errorf("GET /healthz over TLS on the socket: %d %s %q, want 200 over HTTP/2", resp.StatusCode, resp.Proto, b)
	}
	resp, err := c.Post("https://sluice/v1/check", "application/json", strings.NewReader(`{"rule":"per-ip","key":"k"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"allowed":true`) {
		t.Errorf("POST /v1/check: %d %q, want 200 allowed", resp.StatusCode, b)
	}
	// Forward auth: the socket's peer is trusted (unix:), so each client
	// named by X-Forwarded-For counts apart, through TLS as in the clear.
	for i, tc := range []struct {
		client string
		want   int
	}{{"203.0.113.1", 200}, {"203.0.113.2", 200}, {"203.0.113.1", 429}} {
		if resp, b := get("/v1/forward-auth", "X-Forwarded-Uri", "/x", "X-Forwarded-Method", "GET", "X-Forwarded-For", tc.client); resp.StatusCode != tc.want {
			t.Errorf("forward auth %d for %s: %d %q, want %d", i+1, tc.client, resp.StatusCode, b, tc.want)
		}
	}
	if resp, b := get("/metrics"); resp.StatusCode != http.StatusOK || !strings.Contains(b, "sluice_") {
		t.Errorf("GET /metrics: %d, want 200 with the metrics", resp.StatusCode)
	}

	for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "a SAN not in the list": {ud.bad.TLS}} {
		if resp, err := ud.client(certs...).Get("https://sluice/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("HTTPS on the socket with %s: %d, want the handshake refused", name, resp.StatusCode)
		}
		if _, err := ud.rls(t, "u", certs...); err == nil {
			t.Errorf("gRPC over TLS on the socket with %s: answered, want refused", name)
		}
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if r, err := ud.rls(t, "u", ud.good.TLS); err != nil || r.OverallCode != want {
			t.Errorf("gRPC over TLS on the socket, call %d: %v, %v; want %v", i+1, r.GetOverallCode(), err, want)
		}
	}

	// Plain HTTP on the TLS socket: never a decision nor a health answer.
	pc, err := net.Dial("unix", ud.api)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pc.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(pc, "GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n")
	if r, err := http.ReadResponse(bufio.NewReader(pc), nil); err == nil && r.StatusCode == http.StatusOK {
		t.Error("plain HTTP on the TLS socket answered 200")
	}

	if err := ud.stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{ud.api, ud.grpcSock} {
		if !gone(s) {
			t.Errorf("%s is still there after the daemon stopped", s)
		}
	}
}

// A certificate renewed by renames is served on the Unix sockets' TLS
// without a reload, as on TCP.
func TestUnixTLSCertRotated(t *testing.T) {
	ud := startUnixTLSDaemon(t)
	served := func() [2]string {
		var s [2]string
		for i, sock := range []string{ud.api, ud.grpcSock} {
			cfg := ud.serverCA.ClientConfig(ud.good.TLS)
			cfg.NextProtos = []string{"h2"}
			raw, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatalf("dial %s: %v", sock, err)
			}
			c := tls.Client(raw, cfg)
			if err := c.Handshake(); err != nil {
				t.Fatalf("TLS on %s: %v", sock, err)
			}
			s[i] = c.ConnectionState().PeerCertificates[0].SerialNumber.String()
			c.Close()
		}
		return s
	}
	first := served()
	if first[0] == "" || first[0] != first[1] {
		t.Fatalf("served %v, want one certificate on both sockets", first)
	}
	second := ud.serverCA.Server(t)
	replace(t, ud.keyFile, read(t, second.KeyFile))
	replace(t, ud.certFile, read(t, second.CertFile))
	want := second.TLS.Leaf.SerialNumber.String()
	waitFor(t, "the renewed certificate served on both sockets", func() bool { return served() == [2]string{want, want} })
}
