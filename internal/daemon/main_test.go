package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// TestMain doubles as a daemon process for the tests that need a second
// one to SIGKILL: with SLUICE_TEST_DAEMON=FILE, the test binary runs the
// daemon on FILE (as sluice serve does),
// prints its addresses as one JSON line, and serves until killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("SLUICE_TEST_DAEMON"); path != "" {
		os.Exit(childDaemon(path))
	}
	os.Exit(m.Run())
}

func childDaemon(path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child daemon:", err)
		return 2
	}
	d, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child daemon:", err)
		return 2
	}
	json.NewEncoder(os.Stdout).Encode(d.Addrs())
	if err := d.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "child daemon:", err)
		return 1
	}
	return 0
}
