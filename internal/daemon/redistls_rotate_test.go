package daemon

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// store.redis.tls's files are watched and read again: a client
// certificate rotated to one of a new CA, which Redis now requires
// alone, is presented by the connections made after (CLIENT KILL forces
// them), and decisions carry on over Redis; the old certificate is
// refused by Redis by then. A file broken on change is logged, naming
// it, the certificate in force stays, and a SIGHUP reload is refused
// naming store.redis.tls.
func TestRedisTLSRotatedClientCert(t *testing.T) {
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
	td := startDaemon(t, fmt.Sprintf(`listen: 127.0.0.1:0
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
`, rs.TLSAddr, ca1.File, certFile, keyFile))
	if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz: %d %s, want 200", r.status, r.body)
	}
	if n := allowedOf(t, td.api, "r", "k", 3); n != 3 {
		t.Fatalf("before the rotation: %d of 3 admitted, want 3 (on_error: deny: Redis answers)", n)
	}
	kill := func() {
		t.Helper()
		n, err := redistest.Do(rs.Addr, "CLIENT", "KILL", "TYPE", "normal")
		if err != nil || n == "0" {
			t.Fatalf("CLIENT KILL TYPE normal: %q, %v: want the daemon's connections killed", n, err)
		}
	}
	// Decisions on Redis again once the client reconnected (the call
	// that meets a killed connection fails: 503 under on_error: deny).
	decidesAgain := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // a failure's bound, not a synchronisation
		for {
			if a, status := check(t, td.api, "r", "k", 1); status == http.StatusOK && a.Allowed {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no decision on Redis after the connections were killed; logs:\n%s", what, td.logs.String())
			}
		}
	}
	inForce := func() string { return td.d.redisTLS.Load().Certificates[0].Leaf.Subject.CommonName }

	// A broken certificate (half written): logged, naming the file; the
	// certificate in force stays, a reconnection uses it; a reload is
	// refused naming store.redis.tls.
	before := td.d.redisTLS.Load()
	good := read(t, certFile)
	replace(t, certFile, good[:len(good)/2])
	waitFor(t, "the broken store.redis.tls.cert logged", func() bool {
		l := td.logs.String()
		return strings.Contains(l, "store.redis.tls: files not reloaded") && strings.Contains(l, certFile)
	})
	if td.d.redisTLS.Load() != before {
		t.Error("a broken certificate file changed the client TLS in force")
	}
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), "store.redis.tls") || !strings.Contains(err.Error(), certFile) {
		t.Errorf("Reload with a broken store.redis.tls.cert = %v, want a refusal naming store.redis.tls and %s", err, certFile)
	}
	kill()
	decidesAgain("with a broken certificate file")
	if cn := inForce(); cn != "sluice-old" {
		t.Errorf("client certificate in force %q, want sluice-old", cn)
	}

	// Rotated to a certificate of a new CA, and Redis trusts only the
	// new CA from then on.
	ca2 := tlstest.NewCA(t, "redis-ca-2")
	next := ca2.Client(t, "sluice-new", nil)
	replace(t, keyFile, read(t, next.KeyFile))
	replace(t, certFile, read(t, next.CertFile))
	waitFor(t, "the rotated client certificate in force", func() bool { return inForce() == "sluice-new" })
	newCA := filepath.Join(dir, "redis-clients-ca-2.pem")
	replace(t, newCA, read(t, ca2.File))
	if _, err := redistest.Do(rs.Addr, "CONFIG", "SET", "tls-ca-cert-file", newCA); err != nil {
		t.Fatalf("CONFIG SET tls-ca-cert-file: %v", err)
	}
	kill()
	decidesAgain("after the rotation")
	if n := allowedOf(t, td.api, "r", "k", 3); n != 3 {
		t.Errorf("after the rotation: %d of 3 admitted, want 3", n)
	}
	if !strings.Contains(td.logs.String(), "store.redis.tls: files changed") {
		t.Error("the rotation was not logged")
	}
	// The old certificate would no longer do: Redis refuses it.
	if err := pingTLS(rs.TLSAddr, ca1, old); err == nil {
		t.Error("Redis still accepts the old client certificate: the test proves nothing")
	}
	if err := pingTLS(rs.TLSAddr, ca1, next); err != nil {
		t.Errorf("PING with the new client certificate: %v", err)
	}
}

// pingTLS sends PING over TLS to addr with client pair p, verifying
// Redis's certificate against ca, and reads the answer.
func pingTLS(addr string, ca *tlstest.CA, p tlstest.Pair) error {
	c, err := tls.Dial("tcp", addr, ca.ClientConfig(p.TLS))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", got)
	}
	return nil
}
