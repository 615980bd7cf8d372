package daemon

import (
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
	r := newCertRotation(t)
	peer := serversCA.Peer(t)
	master := redistest.StartMTLSServer(t, peer.CertFile, peer.KeyFile, r.trust("master-trust.pem", serversCA, r.ca1))
	sentinel := redistest.StartTLSSentinel(t, master, peer.CertFile, peer.KeyFile, r.trust("sentinel-trust.pem", serversCA, r.ca1))
	td := startDaemon(t, redisTLSYAML([]string{sentinel.TLSAddr}, "sentinel: mymaster", r.tls(serversCA.File), "1000/h"))
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

	r.rotate()
	waitClientCertInForce(t, td, "sluice-new")
	setRedisClientCA(t, master.Addr, r.trust("master-trust-2.pem", serversCA, r.ca2))
	killRedisClients(t, master.Addr)
	r.trust("sentinel-trust.pem", serversCA, r.ca2) // read again by the restart
	sentinel.Restart()
	for _, s := range []struct{ name, addr string }{{"the master", master.TLSAddr}, {"the Sentinel", sentinel.TLSAddr}} {
		if err := pingTLS(s.addr, serversCA, r.old); err == nil {
			t.Fatalf("%s still accepts the old client certificate: the test proves nothing", s.name)
		}
		if err := pingTLS(s.addr, serversCA, r.next); err != nil {
			t.Errorf("PING %s with the new client certificate: %v", s.name, err)
		}
	}
	decidesOnRedis(t, td, "k", "after the rotation")
	waitFor(t, "the daemon listening to the restarted Sentinel over TLS", func() bool { return watching() > 0 })
}
