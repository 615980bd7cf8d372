package main

import (
	"context"
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
	}{
		{"wrong password", rs.TLSAddr, ", password: wrong", []string{trust}, []string{"store.redis", "refused the credentials", "WRONGPASS", "store.redis.password"}},
		{"CA not trusted", rs.TLSAddr, ", password: s3cret", []string{"SSL_CERT_FILE=" + tlstest.NewCA(t, "other").File}, []string{"store.redis", "store.redis.tls", "certificate"}},
	} {
		code, stderr := serveExit(t, tlsRedisConfig(t, tc.addr, tc.creds), tc.env...)
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
