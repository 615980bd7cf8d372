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

// The tests of store.redis.tls against Redis over TLS (redistls_*_test.go,
// tls_cluster_test.go) share what follows: the daemon's configuration, the
// client certificate files a rotation writes over, and the Redis side of a
// rotation (the CA it trusts, its clients killed, a decision made on it again).

// redisTLSYAML is the daemon's configuration over store.redis.tls to addrs:
// mode is a line under store.redis ("cluster: true", "sentinel: mymaster")
// or "", tls the value of store.redis.tls; one rule r of rate in a fixed
// window, and on_error: deny, so that a decision Redis does not make is
// refused.
func redisTLSYAML(addrs []string, mode, tls, rate string) string {
	if mode != "" {
		mode = "\n    " + mode
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis:
    addrs: [%s]%s
    timeout: 2s
    tls: %s
  on_error: deny
rules:
  - name: r
    rate: %s
    algorithm: fixed_window
`, strings.Join(addrs, ", "), mode, tls, rate)
}

// certRotation is the daemon's client certificate for Redis and its
// rotation: the files certFile and keyFile in dir hold old, a client pair
// ("sluice-old") of ca1, until rotate writes next over them, a pair
// ("sluice-new") of ca2, a CA Redis does not trust until it is told to.
type certRotation struct {
	t                 *testing.T
	dir               string
	ca1, ca2          *tlstest.CA
	old, next         tlstest.Pair
	certFile, keyFile string
}

func newCertRotation(t *testing.T) *certRotation {
	t.Helper()
	r := &certRotation{t: t, dir: t.TempDir()}
	r.ca1 = tlstest.NewCA(t, "redis-clients-1")
	r.ca2 = tlstest.NewCA(t, "redis-clients-2")
	r.old = r.ca1.Client(t, "sluice-old", nil)
	r.next = r.ca2.Client(t, "sluice-new", nil)
	r.certFile, r.keyFile = filepath.Join(r.dir, "client.crt"), filepath.Join(r.dir, "client.key")
	replace(t, r.certFile, read(t, r.old.CertFile))
	replace(t, r.keyFile, read(t, r.old.KeyFile))
	return r
}

// tls is store.redis.tls's value: the CA file that verifies Redis's
// certificate, and the client certificate files.
func (r *certRotation) tls(serverCA string) string {
	return fmt.Sprintf("{ca: %s, cert: %s, key: %s}", serverCA, r.certFile, r.keyFile)
}

// trust writes the certificates of cas to file name in r.dir (replacing
// it), a bundle Redis verifies its clients with, and returns its path.
func (r *certRotation) trust(name string, cas ...*tlstest.CA) string {
	r.t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, read(r.t, ca.File)...)
	}
	p := filepath.Join(r.dir, name)
	replace(r.t, p, b)
	return p
}

// rotate writes the new pair over the client certificate files, the key
// first.
func (r *certRotation) rotate() {
	r.t.Helper()
	replace(r.t, r.keyFile, read(r.t, r.next.KeyFile))
	replace(r.t, r.certFile, read(r.t, r.next.CertFile))
}

// clientCertInForce is the common name of the client certificate the
// daemon presents to Redis on its next connection.
func clientCertInForce(td *testDaemon) string {
	return td.d.redisTLS.Load().Certificates[0].Leaf.Subject.CommonName
}

// waitClientCertInForce waits until the watch has put the certificate
// named cn in force.
func waitClientCertInForce(t *testing.T, td *testDaemon, cn string) {
	t.Helper()
	waitFor(t, "the rotated client certificate in force", func() bool { return clientCertInForce(td) == cn })
}

// setRedisClientCA has Redis at addr (plain) verify its clients' TLS
// certificates with the bundle file from now on.
func setRedisClientCA(t *testing.T, addr, file string) {
	t.Helper()
	if _, err := redistest.Do(addr, "CONFIG", "SET", "tls-ca-cert-file", file); err != nil {
		t.Fatalf("CONFIG SET tls-ca-cert-file on %s: %v", addr, err)
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
