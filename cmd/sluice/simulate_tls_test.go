package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// simMemory is what -store memory prints for simTrace under args.
func simMemory(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := simulateCmd(t, simTrace, args...)
	if code != 0 {
		t.Fatalf("-store memory: exit %d: %s", code, errOut)
	}
	return out
}

// -store redis over TLS, against a real redis-server serving TLS with a
// certificate of a test CA: with -redis-tls-ca naming that CA, the trace
// is decided there and prints what -store memory prints, and the run's
// keys are gone after it. A CA that did not sign Redis's certificate, a
// server name it is not for, or no TLS at Redis's TLS port stops the run
// naming the flag to check.
func TestSimulateRedisTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Server(t)
	rs := redistest.StartTLSServer(t, srv.CertFile, srv.KeyFile)
	args := []string{"-algorithm", "gcra", "-rate", "2/s"}
	mem := simMemory(t, args...)
	redis := append(args, "-store", "redis", "-redis", rs.TLSAddr)

	for _, extra := range [][]string{
		{"-redis-tls-ca", ca.File},
		{"-redis-tls", "-redis-tls-ca", ca.File, "-redis-tls-server-name", "localhost"},
	} {
		code, out, errOut := simulateCmd(t, simTrace, append(redis, extra...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errOut)
		}
		if out != mem {
			t.Errorf("%v: -store redis over TLS printed\n%s\n-store memory printed\n%s", extra, out, mem)
		}
	}
	if n, err := redistest.Do(rs.Addr, "DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE after the TLS runs: %q (%v), want 0 (the runs delete their keys)", n, err)
	}

	other := tlstest.NewCA(t, "other")
	for _, tc := range []struct {
		name  string
		extra []string
		want  []string
	}{
		{"wrong CA", []string{"-redis-tls-ca", other.File}, []string{"the TLS handshake failed", "(check -redis-tls-ca and Redis's certificate"}},
		{"system roots", []string{"-redis-tls"}, []string{"the TLS handshake failed", "(check -redis-tls-ca"}},
		{"wrong name", []string{"-redis-tls-ca", ca.File, "-redis-tls-server-name", "redis.example"}, []string{"(check -redis-tls-server-name: Redis's certificate is for [localhost 127.0.0.1 ::1], not redis.example"}},
		{"no TLS", nil, []string{rs.TLSAddr + " serves TLS", "(add -redis-tls"}},
	} {
		code, out, errOut := simulateCmd(t, simTrace, append(redis, tc.extra...)...)
		if code != 1 || out != "" {
			t.Errorf("%s: exit %d, stdout %q; want exit 1 and nothing: %s", tc.name, code, out, errOut)
			continue
		}
		for _, w := range append(tc.want, "sluice simulate: -store redis: ") {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr %q; want it to say %q", tc.name, errOut, w)
			}
		}
	}
}

// -redis-tls alone verifies Redis's certificate against the system's
// roots, as store.redis.tls: true does: a process that trusts the test CA
// as Go trusts any (SSL_CERT_FILE) decides the trace over TLS. A process
// of its own, as Go reads the system's roots once.
func TestSimulateRedisTLSSystemRoots(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Server(t)
	rs := redistest.StartTLSServer(t, srv.CertFile, srv.KeyFile)
	args := []string{"simulate", "-algorithm", "sliding_window_log", "-rate", "2/s"}
	mem := simMemory(t, args[1:]...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append(args, "-store", "redis", "-redis", rs.TLSAddr, "-redis-tls")...)
	cmd.Env = append(os.Environ(), "SLUICE_TEST_MAIN=1", "SSL_CERT_FILE="+ca.File)
	cmd.Stdin = strings.NewReader(simTrace)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("simulate -redis-tls trusting the CA through SSL_CERT_FILE: %v: %s", err, stderr.String())
	}
	if string(out) != mem {
		t.Errorf("-store redis -redis-tls printed\n%s\n-store memory printed\n%s", out, mem)
	}
}

// -store redis over mutual TLS (Redis's tls-auth-clients): with
// -redis-tls-cert and -redis-tls-key of a certificate Redis's CA signed,
// the trace is decided there; without them Redis refuses the connection,
// and the run stops naming the two flags.
func TestSimulateRedisMTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Server(t)
	rs := redistest.StartMTLSServer(t, srv.CertFile, srv.KeyFile, ca.File)
	client := ca.Client(t, "sim", nil)
	args := []string{"-algorithm", "leaky_bucket", "-rate", "2/s", "-burst", "3"}
	mem := simMemory(t, args...)
	redis := append(args, "-store", "redis", "-redis", rs.TLSAddr, "-redis-tls-ca", ca.File)

	code, out, errOut := simulateCmd(t, simTrace, append(redis, "-redis-tls-cert", client.CertFile, "-redis-tls-key", client.KeyFile)...)
	if code != 0 {
		t.Fatalf("with a client certificate: exit %d: %s", code, errOut)
	}
	if out != mem {
		t.Errorf("-store redis over mutual TLS printed\n%s\n-store memory printed\n%s", out, mem)
	}

	code, out, errOut = simulateCmd(t, simTrace, redis...)
	if code != 1 || out != "" || !strings.Contains(errOut, "check -redis-tls-cert and -redis-tls-key") {
		t.Errorf("without a client certificate: exit %d, stdout %q, stderr %q; want exit 1 naming -redis-tls-cert and -redis-tls-key", code, out, errOut)
	}
}

// The -redis-tls flags' problems are said before any connection, each
// naming its flag (and the file): a certificate without its key or the
// reverse, a file that cannot be read, a CA file with no certificate, a
// key that is not the certificate's; and the flags without -store redis,
// or with -redis-tls=false, are refused.
func TestSimulateRedisTLSFlags(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	client := ca.Client(t, "sim", nil)
	other := ca.Client(t, "other", nil)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: a problem of the flags must be said before
	// connecting, not as a refused connection.
	redis := []string{"-store", "redis", "-redis", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-redis-tls-cert", client.CertFile}, "sluice simulate: -redis-tls-cert needs -redis-tls-key"},
		{[]string{"-redis-tls-key", client.KeyFile}, "sluice simulate: -redis-tls-key needs -redis-tls-cert"},
		{[]string{"-redis-tls-ca", missing}, "sluice simulate: -redis-tls-ca: " + missing + ": no such file or directory"},
		{[]string{"-redis-tls-ca", dir}, "sluice simulate: -redis-tls-ca: " + dir + ": is a directory"},
		{[]string{"-redis-tls-ca", notPEM}, "sluice simulate: -redis-tls-ca: " + notPEM + ": no PEM certificate in it"},
		{[]string{"-redis-tls-ca", ""}, "sluice simulate: -redis-tls-ca: empty path"},
		{[]string{"-redis-tls-cert", missing, "-redis-tls-key", client.KeyFile}, "sluice simulate: -redis-tls-cert: " + missing + ": no such file or directory"},
		{[]string{"-redis-tls-cert", client.CertFile, "-redis-tls-key", missing}, "sluice simulate: -redis-tls-key: " + missing + ": no such file or directory"},
		{[]string{"-redis-tls-cert", client.CertFile, "-redis-tls-key", other.KeyFile}, "sluice simulate: -redis-tls-key: " + other.KeyFile + ": with the certificate " + client.CertFile},
		// Two problems, a line each.
		{[]string{"-redis-tls-ca", notPEM, "-redis-tls-cert", missing, "-redis-tls-key", client.KeyFile}, "-redis-tls-ca: " + notPEM + ": no PEM certificate in it\nsluice simulate: -redis-tls-cert: " + missing},
		{[]string{"-redis-tls=false", "-redis-tls-ca", ca.File}, "sluice simulate: -redis-tls=false, with -redis-tls-ca: those are TLS's"},
	} {
		code, out, errOut := simulateCmd(t, "1,a\n", append(append([]string{"-rate", "5/s"}, redis...), tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "connect") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 saying %q before connecting", tc.args, code, out, errOut, tc.want)
		}
	}
	code, out, errOut := simulateCmd(t, "1,a\n", "-rate", "5/s", "-redis-tls", "-redis-tls-ca", ca.File)
	if want := "sluice simulate: -redis-tls, -redis-tls-ca: for -store redis only (-store is memory)"; code != 1 || out != "" || !strings.Contains(errOut, want) {
		t.Errorf("-redis-tls without -store redis: exit %d, stdout %q, stderr %q; want exit 1 saying %q", code, out, errOut, want)
	}
}
