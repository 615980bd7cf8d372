package daemon

import (
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
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	nodesCA := tlstest.NewCA(t, "redis-nodes")
	r := newCertRotation(t)
	peer := nodesCA.Peer(t)
	c := redistest.StartMTLSCluster(t, peer.CertFile, peer.KeyFile, r.trust("trust-1.pem", nodesCA, r.ca1))
	td := startDaemon(t, redisTLSYAML(c.TLSAddrs, "cluster: true", r.tls(nodesCA.File), "1000/h"))
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

	r.rotate()
	waitClientCertInForce(t, td, "sluice-new")
	trust2 := r.trust("trust-2.pem", nodesCA, r.ca2)
	killed := 0
	for _, a := range c.Addrs {
		setRedisClientCA(t, a, trust2)
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
		if err := pingTLS(a, nodesCA, r.old); err == nil {
			t.Fatalf("master %s still accepts the old client certificate: the test proves nothing", c.Addrs[i])
		}
		if err := pingTLS(a, nodesCA, r.next); err != nil {
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
