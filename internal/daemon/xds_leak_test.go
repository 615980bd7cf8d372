package daemon

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The daemon stopping while its xDS stream is open, or while it waits to
// subscribe again, leaves no goroutine or descriptor behind.
func TestXDSStopLeavesNothing(t *testing.T) {
	for _, away := range []bool{false, true} {
		name := "stream open"
		if away {
			name = "server away"
		}
		t.Run(name, func(t *testing.T) {
			x := startXDSServer(t)
			x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 2)))
			g, fds := runtime.NumGoroutine(), openFDs(t)
			yaml := "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  xds:\n    server: " + x.addr +
				"\n    node_id: " + xdsNodeID + "\n    retry: 10ms\n"
			path := filepath.Join(t.TempDir(), "sluice.yaml")
			if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			td := startDaemonWith(t, path, nil)
			x.waitACK("v1")
			if away {
				x.stop()
				waitFor(t, "the subscription broken", func() bool { return strings.Contains(td.logs.String(), "xDS subscription broken") })
			}
			if err := td.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			settled(t, "after the daemon stopped", g, fds)
		})
	}
}
