package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFleetSIGTERMReturnsUnits: a `sluice serve` stopped with SIGTERM
// gives back the lease units it holds and did not spend, so the rest of
// the fleet can admit them in the same window; with SIGKILL they would be
// held by nobody until the window ends.
func TestFleetSIGTERMReturnsUnits(t *testing.T) {
	rs := redistest.StartServer(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log_level: warn
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: hard
    rate: 10/h
    algorithm: fixed_window
    lease: 5
`, rs.Addr)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := startSluiceProc(t, path), startSluiceProc(t, path)
	// a: the first request is decided in Redis, the second reserves 5
	// units and spends one: 6 counted, 2 admitted, 4 held.
	if got := drive(t, []string{a.api}, "hard", "k", 2, 1); got != 2 {
		t.Fatalf("a admitted %d of 2, want 2", got)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if a.err != nil {
		t.Fatalf("sluice serve after SIGTERM: %v, want exit 0\n%s", a.err, a.logs.String())
	}
	if got := drive(t, []string{b.api}, "hard", "k", 12, 1); got != 8 {
		t.Fatalf("after a's SIGTERM, b admitted %d of 12, want the 8 a did not spend (its 4 held units given back)", got)
	}
}
