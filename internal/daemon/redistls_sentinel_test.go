package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// store.redis.tls's client certificate rotated with Sentinel, the master
// and the Sentinel both requiring client certificates: once both trust
// only the new clients' CA (the master by CONFIG SET, the Sentinel, which
// has no CONFIG SET, restarted) the daemon dials both again with the new
// certificate: decisions are made on the master, and the Sentinel has a
// TLS client again (the daemon's, which hears of failovers there). (The
// servers' certificates come from a CA of their own, trusted throughout:
// the Sentinel presents its own to the master.)
func TestRedisTLSSentinelRotatedClientCert(t *testing.T) {
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	serversCA := tlstest.NewCA(t, "redis-servers")
	ca1 := tlstest.NewCA(t, "redis-clients-1")
	dir := t.TempDir()
	trust := func(name string, cas ...*tlstest.CA) string {
		var b []byte
		for _, ca := range cas {
			b = append(b, read(t, ca.File)...)
		}
		p := filepath.Join(dir, name)
		replace(t, p, b)
		return p
	}
	peer := serversCA.Peer(t)
	master := redistest.StartMTLSServer(t, peer.CertFile, peer.KeyFile, trust("master-trust.pem", serversCA, ca1))
	sentinel := redistest.StartTLSSentinel(t, master, peer.CertFile, peer.KeyFile, trust("sentinel-trust.pem", serversCA, ca1))

	old := ca1.Client(t, "sluice-old", nil)
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	replace(t, certFile, read(t, old.CertFile))
	replace(t, keyFile, read(t, old.KeyFile))
	td := startDaemon(t, fmt.Sprintf(`listen: 127.0.0.1:0
store:
  type: redis
  redis:
    addrs: [%s]
    sentinel: mymaster
    timeout: 2s
    tls: {ca: %s, cert: %s, key: %s}
  on_error: deny
rules:
  - name: r
    rate: 1000/h
    algorithm: fixed_window
`, sentinel.TLSAddr, serversCA.File, certFile, keyFile))
	if n := allowedOf(t, td.api, "r", "k", 3); n != 3 {
		t.Fatalf("before the rotation: %d of 3 admitted, want 3 (on_error: deny: the master answers)", n)
	}
	// watching counts the Sentinel's clients on its TLS port that
	// subscribed to channels: the daemon's, which hears of failovers.
	watching := func() int {
		l, err := redistest.Do(sentinel.Addr, "CLIENT", "LIST")
		if err != nil {
			t.Fatalf("CLIENT LIST on the Sentinel: %v", err)
		}
		n := 0
		for c := range strings.Lines(l) {
			if strings.Contains(c, " laddr="+sentinel.TLSAddr+" ") && !strings.Contains(c, " sub=0 ") {
				n++
			}
		}
		return n
	}
	if watching() == 0 {
		t.Fatal("the daemon does not listen to the Sentinel over TLS: the test would prove nothing")
	}

	ca2 := tlstest.NewCA(t, "redis-clients-2")
	next := ca2.Client(t, "sluice-new", nil)
	replace(t, keyFile, read(t, next.KeyFile))
	replace(t, certFile, read(t, next.CertFile))
	waitFor(t, "the rotated client certificate in force", func() bool {
		return td.d.redisTLS.Load().Certificates[0].Leaf.Subject.CommonName == "sluice-new"
	})
	if _, err := redistest.Do(master.Addr, "CONFIG", "SET", "tls-ca-cert-file", trust("master-trust-2.pem", serversCA, ca2)); err != nil {
		t.Fatalf("CONFIG SET tls-ca-cert-file on the master: %v", err)
	}
	killRedisClients(t, master.Addr)
	trust("sentinel-trust.pem", serversCA, ca2) // read again by the restart
	sentinel.Restart()
	for _, s := range []struct{ name, addr string }{{"the master", master.TLSAddr}, {"the Sentinel", sentinel.TLSAddr}} {
		if err := pingTLS(s.addr, serversCA, old); err == nil {
			t.Fatalf("%s still accepts the old client certificate: the test proves nothing", s.name)
		}
		if err := pingTLS(s.addr, serversCA, next); err != nil {
			t.Errorf("PING %s with the new client certificate: %v", s.name, err)
		}
	}
	decidesOnRedis(t, td, "k", "after the rotation")
	waitFor(t, "the daemon listening to the restarted Sentinel over TLS", func() bool { return watching() > 0 })
}
