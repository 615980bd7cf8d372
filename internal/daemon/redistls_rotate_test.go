package daemon

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
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
	rot := newCertRotation(t)
	srv := rot.ca1.Server(t)
	rs := redistest.StartMTLSServer(t, srv.CertFile, srv.KeyFile, rot.trust("redis-clients-ca.pem", rot.ca1))
	td := startDaemon(t, redisTLSYAML([]string{rs.TLSAddr}, "", rot.tls(rot.ca1.File), "1000/h"))
	if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz: %d %s, want 200", r.status, r.body)
	}
	if n := allowedOf(t, td.api, "r", "k", 3); n != 3 {
		t.Fatalf("before the rotation: %d of 3 admitted, want 3 (on_error: deny: Redis answers)", n)
	}

	// A broken certificate (half written): logged, naming the file; the
	// certificate in force stays, a reconnection uses it; a reload is
	// refused naming store.redis.tls.
	before := td.d.redisTLS.Load()
	good := read(t, rot.certFile)
	replace(t, rot.certFile, good[:len(good)/2])
	waitFor(t, "the broken store.redis.tls.cert logged", func() bool {
		l := td.logs.String()
		return strings.Contains(l, "store.redis.tls: files not reloaded") && strings.Contains(l, rot.certFile)
	})
	if td.d.redisTLS.Load() != before {
		t.Error("a broken certificate file changed the client TLS in force")
	}
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), "store.redis.tls") || !strings.Contains(err.Error(), rot.certFile) {
		t.Errorf("Reload with a broken store.redis.tls.cert = %v, want a refusal naming store.redis.tls and %s", err, rot.certFile)
	}
	killRedisClients(t, rs.Addr)
	decidesOnRedis(t, td, "k", "with a broken certificate file")
	if cn := clientCertInForce(td); cn != "sluice-old" {
		t.Errorf("client certificate in force %q, want sluice-old", cn)
	}

	// Rotated to a certificate of a new CA, and Redis trusts only the
	// new CA from then on.
	rot.rotate()
	waitClientCertInForce(t, td, "sluice-new")
	setRedisClientCA(t, rs.Addr, rot.trust("redis-clients-ca-2.pem", rot.ca2))
	killRedisClients(t, rs.Addr)
	decidesOnRedis(t, td, "k", "after the rotation")
	if n := allowedOf(t, td.api, "r", "k", 3); n != 3 {
		t.Errorf("after the rotation: %d of 3 admitted, want 3", n)
	}
	if !strings.Contains(td.logs.String(), "store.redis.tls: files changed") {
		t.Error("the rotation was not logged")
	}
	// The old certificate would no longer do: Redis refuses it.
	if err := pingTLS(rs.TLSAddr, rot.ca1, rot.old); err == nil {
		t.Error("Redis still accepts the old client certificate: the test proves nothing")
	}
	if err := pingTLS(rs.TLSAddr, rot.ca1, rot.next); err != nil {
		t.Errorf("PING with the new client certificate: %v", err)
	}
}
