package daemon

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestTokenReadyzKeepsStoreErrorsIn: with api.token_file, /readyz stays
// open for probes, but why the store does not answer (Redis's error: its
// address, its state) is told only to a request that carries the token,
// as the deferred status hides it from clients: an open probe path must
// not map the network behind the daemon.
func TestTokenReadyzKeepsStoreErrorsIn(t *testing.T) {
	rs := redistest.StartServer(t)
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "tok\n")
	td := startDaemon(t, fmt.Sprintf("listen: 127.0.0.1:0\napi:\n  token_file: %s\nstore:\n  type: redis\n  redis: {addrs: [%s], timeout: 500ms}\nrules:\n  - {name: keep, rate: 100/m}\n", token, rs.Addr))
	for get(t, td.api+"/readyz").status != http.StatusOK {
		// connecting
	}
	rs.Stop()
	with := get(t, td.api+"/readyz", "Authorization", "Bearer tok")
	if with.status != http.StatusServiceUnavailable || !strings.Contains(with.body, "not ready: ") || len(with.body) < len(`{"error":"not ready: x"}`) {
		t.Fatalf("GET /readyz with the token, Redis stopped: %d %q, want 503 with the store's error", with.status, with.body)
	}
	without := get(t, td.api+"/readyz")
	if without.status != http.StatusServiceUnavailable || !strings.Contains(without.body, "not ready") {
		t.Errorf("GET /readyz without the token, Redis stopped: %d %q, want 503 not ready", without.status, without.body)
	}
	host := rs.Addr[:strings.LastIndexByte(rs.Addr, ':')]
	if strings.Contains(without.body, rs.Addr) || strings.Contains(without.body, host) || strings.Contains(without.body, "dial") {
		t.Errorf("GET /readyz without the token: %q names the store's address or error (with the token: %q)", without.body, with.body)
	}
}
