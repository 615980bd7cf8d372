package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// tlsRedisConfig writes a config for a Redis at addr with tls: true and
// creds, with a rule of 2 an hour.
func tlsRedisConfig(t *testing.T, addr, creds string) string {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	conf := fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], tls: true, timeout: 2s%s}
rules:
  - name: two
    rate: 2/h
    algorithm: fixed_window
`, addr, creds)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveExit runs `sluice serve -config path` with env to its exit, which
// must come by itself (a daemon that starts is stopped after a minute and
// fails the test), and returns its exit code and standard error.
func serveExit(t *testing.T, path string, env ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "serve", "-config", path)
	cmd.Env = append(append(os.Environ(), "SLUICE_TEST_MAIN=1"), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sluice serve did not exit by itself:\n%s", stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stderr.String()
}

// store.redis.tls and password end to end, against a real redis-server
// serving TLS with a certificate of a test CA and asking for a password.
// The process trusts the CA as Go trusts any (SSL_CERT_FILE, the system's
// roots): it connects and counts. A wrong password over TLS, or a
// certificate the process does not trust, is a startup error that names
// the problem and the keys to check, not a daemon failing open.
func TestServeRedisTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Server(t)
	rs := redistest.StartTLSServer(t, srv.CertFile, srv.KeyFile)
	if _, err := redistest.Do(rs.Addr, "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	trust := "SSL_CERT_FILE=" + ca.File

	p := startSluiceProcEnv(t, tlsRedisConfig(t, rs.TLSAddr, ", password: s3cret"), trust)
	resp, err := fleetClient.Get(p.api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz over a TLS Redis: %d, want 200", resp.StatusCode)
	}
	admitted := 0
	for range 3 {
		a, err := fleetCheck(t, p.api, "two", "k")
		if err != nil {
			t.Fatal(err)
		}
		if a.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("%d of 3 admitted under 2/h over a TLS Redis, want 2 (counted in Redis)", admitted)
	}

	for _, tc := range []struct {
		name, addr, creds string
		env               []string
		want              []string
		plain             bool // tls: false
	}{
		{"wrong password", rs.TLSAddr, ", password: wrong", []string{trust}, []string{"store.redis", "refused the credentials", "WRONGPASS", "store.redis.password"}, false},
		{"CA not trusted", rs.TLSAddr, ", password: s3cret", []string{"SSL_CERT_FILE=" + tlstest.NewCA(t, "other").File}, []string{"store.redis", "store.redis.tls", "certificate"}, false},
		// tls: false to the TLS port, which resets a plain connection
		// unanswered: said to serve TLS, not "connection reset by peer"
		// alone.
		{"TLS off", rs.TLSAddr, ", password: s3cret", []string{trust}, []string{"store.redis.tls", rs.TLSAddr + " serves TLS"}, true},
	} {
		path := tlsRedisConfig(t, tc.addr, tc.creds)
		if tc.plain {
			b, _ := os.ReadFile(path)
			os.WriteFile(path, bytes.Replace(b, []byte("tls: true"), []byte("tls: false"), 1), 0o644)
		}
		code, stderr := serveExit(t, path, tc.env...)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1; stderr:\n%s", tc.name, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q, want it to say %q", tc.name, stderr, w)
			}
		}
	}
}

// redisTLSFilesConfig writes, in dir, a config for a Redis at addr with
// store.redis.tls set to the flow mapping tlsMap, with a rule of 2 an hour.
func redisTLSFilesConfig(t *testing.T, dir, addr, tlsMap string) string {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("sluice-%d.yaml", time.Now().UnixNano()))
	conf := fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis:
    addrs: [%s]
    timeout: 2s
    tls: %s
rules:
  - name: two
    rate: 2/h
    algorithm: fixed_window
`, addr, tlsMap)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// store.redis.tls's files end to end, against a real redis-server with
// tls-auth-clients yes (a client certificate required) and a certificate
// of a private CA that the process does not otherwise trust (SSL_CERT_FILE
// names another). With ca:, cert: and key: (paths relative to the config
// file) it connects and counts; server_name: verifies a certificate whose
// name is not the address. A wrong CA, or no client certificate, is a
// startup error naming the key to check.
func TestServeRedisTLSFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	dir := filepath.Dir(ca.File)
	srv := ca.ServerWith(t, "redis", func(c *x509.Certificate) {
		c.DNSNames, c.IPAddresses = []string{"redis.internal"}, nil
	})
	client := ca.Client(t, "sluice", []string{"sluice.internal"})
	rs := redistest.StartMTLSServer(t, srv.CertFile, srv.KeyFile, ca.File)
	distrust := "SSL_CERT_FILE=" + tlstest.NewCA(t, "system").File
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil || strings.HasPrefix(r, "..") {
			t.Fatalf("%s is not in %s", p, dir)
		}
		return r
	}
	files := fmt.Sprintf("ca: %s, cert: %s, key: %s", rel(ca.File), rel(client.CertFile), rel(client.KeyFile))

	p := startSluiceProcEnv(t, redisTLSFilesConfig(t, dir, rs.TLSAddr, "{"+files+", server_name: redis.internal}"), distrust)
	admitted := 0
	for range 3 {
		a, err := fleetCheck(t, p.api, "two", "k")
		if err != nil {
			t.Fatal(err)
		}
		if a.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("%d of 3 admitted under 2/h over mutual TLS with Redis, want 2 (counted in Redis)", admitted)
	}
	if n, err := redistest.Do(rs.Addr, "DBSIZE"); err != nil || n == "0" || n == "" {
		t.Errorf("Redis DBSIZE after 3 decisions = %q, %v; want keys counted there", n, err)
	}

	other := tlstest.NewCA(t, "other")
	for _, tc := range []struct {
		name, tls string
		want      []string
	}{
		{"wrong CA", fmt.Sprintf("{ca: %s, cert: %s, key: %s, server_name: redis.internal}", other.File, client.CertFile, client.KeyFile),
			[]string{"store.redis", "store.redis.tls.ca", "certificate"}},
		{"no client certificate", fmt.Sprintf("{ca: %s, server_name: redis.internal}", ca.File),
			[]string{"store.redis", "store.redis.tls.cert", "certificate"}},
		{"name not the certificate's", "{" + files + "}",
			[]string{"store.redis", "store.redis.tls.server_name", "redis.internal"}},
	} {
		code, stderr := serveExit(t, redisTLSFilesConfig(t, dir, rs.TLSAddr, tc.tls), distrust)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1; stderr:\n%s", tc.name, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q, want it to say %q", tc.name, stderr, w)
			}
		}
	}
}
