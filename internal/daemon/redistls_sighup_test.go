package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// A rotation of store.redis.tls's files that the watch does not see (it
// could not be set up, as on some network filesystems, or missed the
// change) is put in force by a reload (SIGHUP) alone. Here Redis is
// rotated first: it trusts only the new client CA, so the daemon's
// connections, killed, cannot be made again with the old certificate;
// the new files are written, and Reload (what SIGHUP calls) must apply
// them though Redis refuses every connection the daemon makes
// meanwhile: decisions are made on Redis again.
func TestRedisTLSRotatedBySIGHUPAlone(t *testing.T) {
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	ca1 := tlstest.NewCA(t, "redis-ca-1")
	dir := t.TempDir()
	redisCA := filepath.Join(dir, "redis-clients-ca.pem")
	replace(t, redisCA, read(t, ca1.File))
	srv := ca1.Server(t)
	rs := redistest.StartMTLSServer(t, srv.CertFile, srv.KeyFile, redisCA)
	old := ca1.Client(t, "sluice-old", nil)
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	replace(t, certFile, read(t, old.CertFile))
	replace(t, keyFile, read(t, old.KeyFile))
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, `listen: 127.0.0.1:0
store:
  type: redis
  redis:
    addrs: [%s]
    timeout: 2s
    tls: {ca: %s, cert: %s, key: %s}
  on_error: deny
rules:
  - name: r
    rate: 1000/h
    algorithm: fixed_window
`, rs.TLSAddr, ca1.File, certFile, keyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	// The files not watched, as when the watch could not be set up.
	td := startDaemonThen(t, path, nil, func(d *Daemon) {
		if d.certWatcher == nil {
			t.Fatal("store.redis.tls's files are not watched: the test would prove nothing")
		}
		d.certWatcher.Close()
		d.certWatcher = nil
	})
	if n := allowedOf(t, td.api, "r", "k", 3); n != 3 {
		t.Fatalf("before the rotation: %d of 3 admitted, want 3 (on_error: deny: Redis answers)", n)
	}
	inForce := func() string { return td.d.redisTLS.Load().Certificates[0].Leaf.Subject.CommonName }

	// Redis rotated first: only the new CA's clients from now on.
	ca2 := tlstest.NewCA(t, "redis-ca-2")
	next := ca2.Client(t, "sluice-new", nil)
	newCA := filepath.Join(dir, "redis-clients-ca-2.pem")
	replace(t, newCA, read(t, ca2.File))
	if _, err := redistest.Do(rs.Addr, "CONFIG", "SET", "tls-ca-cert-file", newCA); err != nil {
		t.Fatalf("CONFIG SET tls-ca-cert-file: %v", err)
	}
	killRedisClients(t, rs.Addr)
	if err := pingTLS(rs.TLSAddr, ca1, old); err == nil {
		t.Fatal("Redis still accepts the old client certificate: the test proves nothing")
	}
	// The first decision meets the killed connection; the next ones
	// find Redis refusing the old certificate: none admitted.
	for i := range 2 {
		if a, status := check(t, td.api, "r", "k", 1); status != http.StatusServiceUnavailable || a.Allowed {
			t.Fatalf("decision %d with the old certificate refused: status %d, allowed %v; want 503 (on_error: deny)", i+1, status, a.Allowed)
		}
	}

	replace(t, keyFile, read(t, next.KeyFile))
	replace(t, certFile, read(t, next.CertFile))
	if cn := inForce(); cn != "sluice-old" {
		t.Fatalf("client certificate in force %q before the reload, want sluice-old: the files are watched after all", cn)
	}
	if err := td.d.Reload(); err != nil {
		t.Fatalf("Reload (SIGHUP) with the rotated files, Redis refusing the old ones: %v", err)
	}
	if cn := inForce(); cn != "sluice-new" {
		t.Errorf("client certificate in force after the reload %q, want sluice-new", cn)
	}
	decidesOnRedis(t, td, "k", "after the reload")
	if n := allowedOf(t, td.api, "r", "k", 3); n != 3 {
		t.Errorf("after the reload: %d of 3 admitted, want 3", n)
	}
	if !strings.Contains(td.logs.String(), "store.redis.tls: files changed") {
		t.Error("the rotation was not logged")
	}
}

// killRedisClients has Redis at addr (plain) close its clients'
// connections, the daemon's among them: the daemon must dial again.
func killRedisClients(t *testing.T, addr string) {
	t.Helper()
	n, err := redistest.Do(addr, "CLIENT", "KILL", "TYPE", "normal")
	if err != nil || n == "0" {
		t.Fatalf("CLIENT KILL TYPE normal on %s: %q, %v: want the daemon's connections killed", addr, n, err)
	}
}

// decidesOnRedis waits until a decision of rule r for key k is made on
// Redis again (admitted) after the daemon's connections were killed:
// under on_error: deny the call that meets a killed connection is
// answered 503.
func decidesOnRedis(t *testing.T, td *testDaemon, k, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a failure's bound, not a synchronisation
	for {
		if a, status := check(t, td.api, "r", k, 1); status == http.StatusOK && a.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: key %s: no decision on Redis after the connections were killed; logs:\n%s", what, k, td.logs.String())
		}
	}
}
