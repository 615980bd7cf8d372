package daemon

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
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
	r := newCertRotation(t)
	srv := r.ca1.Server(t)
	rs := redistest.StartMTLSServer(t, srv.CertFile, srv.KeyFile, r.trust("redis-clients-ca.pem", r.ca1))
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(redisTLSYAML([]string{rs.TLSAddr}, "", r.tls(r.ca1.File), "1000/h")), 0o644); err != nil {
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

	// Redis rotated first: only the new CA's clients from now on.
	setRedisClientCA(t, rs.Addr, r.trust("redis-clients-ca-2.pem", r.ca2))
	killRedisClients(t, rs.Addr)
	if err := pingTLS(rs.TLSAddr, r.ca1, r.old); err == nil {
		t.Fatal("Redis still accepts the old client certificate: the test proves nothing")
	}
	// The first decision meets the killed connection; the next ones
	// find Redis refusing the old certificate: none admitted.
	for i := range 2 {
		if a, status := check(t, td.api, "r", "k", 1); status != http.StatusServiceUnavailable || a.Allowed {
			t.Fatalf("decision %d with the old certificate refused: status %d, allowed %v; want 503 (on_error: deny)", i+1, status, a.Allowed)
		}
	}

	r.rotate()
	if cn := clientCertInForce(td); cn != "sluice-old" {
		t.Fatalf("client certificate in force %q before the reload, want sluice-old: the files are watched after all", cn)
	}
	if err := td.d.Reload(); err != nil {
		t.Fatalf("Reload (SIGHUP) with the rotated files, Redis refusing the old ones: %v", err)
	}
	if cn := clientCertInForce(td); cn != "sluice-new" {
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
