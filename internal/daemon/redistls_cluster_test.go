package daemon

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// store.redis.tls's client certificate rotated on a Redis Cluster that
// requires client certificates: once the Cluster trusts only the new
// clients' CA and has closed the daemon's connections, every master is
// dialled again with the new certificate and decides. (The nodes'
// certificates come from a CA of their own, trusted throughout: the
// nodes verify each other's with the bundle that verifies clients.)
func TestRedisTLSClusterRotatedClientCert(t *testing.T) {
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	nodesCA := tlstest.NewCA(t, "redis-nodes")
	ca1 := tlstest.NewCA(t, "redis-clients-1")
	dir := t.TempDir()
	bundle := func(name string, cas ...*tlstest.CA) string {
		var b []byte
		for _, ca := range cas {
			b = append(b, read(t, ca.File)...)
		}
		p := filepath.Join(dir, name)
		replace(t, p, b)
		return p
	}
	peer := nodesCA.Peer(t)
	c := redistest.StartMTLSCluster(t, peer.CertFile, peer.KeyFile, bundle("trust-1.pem", nodesCA, ca1))

	old := ca1.Client(t, "sluice-old", nil)
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	replace(t, certFile, read(t, old.CertFile))
	replace(t, keyFile, read(t, old.KeyFile))
	td := startDaemon(t, fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis:
    addrs: [%s]
    cluster: true
    timeout: 2s
    tls: {ca: %s, cert: %s, key: %s}
  on_error: deny
rules:
  - name: r
    rate: 1000/h
    algorithm: fixed_window
`, strings.Join(c.TLSAddrs, ", "), nodesCA.File, certFile, keyFile))
	// Keys on every master: 60 keys miss one of three by chance with
	// probability 3·(2/3)^60, below 1e-10; checked below.
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		if n := allowedOf(t, td.api, "r", keys[i], 1); n != 1 {
			t.Fatalf("before the rotation: key %s not admitted (on_error: deny: the Cluster answers)", keys[i])
		}
	}
	for _, a := range c.Addrs {
		if n, err := redistest.Do(a, "DBSIZE"); err != nil || n == "0" {
			t.Fatalf("DBSIZE on %s: %q, %v: want keys on every master, or the test proves less", a, n, err)
		}
	}

	ca2 := tlstest.NewCA(t, "redis-clients-2")
	next := ca2.Client(t, "sluice-new", nil)
	replace(t, keyFile, read(t, next.KeyFile))
	replace(t, certFile, read(t, next.CertFile))
	waitFor(t, "the rotated client certificate in force", func() bool {
		return td.d.redisTLS.Load().Certificates[0].Leaf.Subject.CommonName == "sluice-new"
	})
	trust2 := bundle("trust-2.pem", nodesCA, ca2)
	killed := 0
	for _, a := range c.Addrs {
		if _, err := redistest.Do(a, "CONFIG", "SET", "tls-ca-cert-file", trust2); err != nil {
			t.Fatalf("CONFIG SET tls-ca-cert-file on %s: %v", a, err)
		}
		n, err := redistest.Do(a, "CLIENT", "KILL", "TYPE", "normal")
		if err != nil {
			t.Fatalf("CLIENT KILL on %s: %v", a, err)
		}
		k, _ := strconv.Atoi(n)
		killed += k
	}
	if killed == 0 {
		t.Fatal("CLIENT KILL closed no connection of the daemon")
	}
	for i, a := range c.TLSAddrs {
		if err := pingTLS(a, nodesCA, old); err == nil {
			t.Fatalf("master %s still accepts the old client certificate: the test proves nothing", c.Addrs[i])
		}
		if err := pingTLS(a, nodesCA, next); err != nil {
			t.Errorf("PING %s with the new client certificate: %v", c.Addrs[i], err)
		}
	}
	for _, k := range keys {
		decidesOnRedis(t, td, k, "after the rotation")
	}
	if !slices.ContainsFunc(strings.Split(td.logs.String(), "\n"), func(l string) bool {
		return strings.Contains(l, "store.redis.tls: files changed")
	}) {
		t.Error("the rotation was not logged")
	}
}
