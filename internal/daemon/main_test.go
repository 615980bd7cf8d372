package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// TestMain doubles as a daemon process for the tests that need a second
// one to SIGKILL: with SLUICE_TEST_DAEMON=FILE, the test binary runs the
// daemon on FILE (as sluice serve does),
// prints its addresses as one JSON line, and serves until killed. With
// SLUICE_TEST_BIND=PATH, it binds a Unix socket at PATH and stops at the
// stage of listenUnix that SLUICE_TEST_BIND_STAGE names (see unixHook):
// it prints the stage as a line and waits, until killed, for its stdin
// to close.
func TestMain(m *testing.M) {
	if path := os.Getenv("SLUICE_TEST_DAEMON"); path != "" {
		os.Exit(childDaemon(path))
	}
	if path := os.Getenv("SLUICE_TEST_BIND"); path != "" {
		os.Exit(childBind(path, os.Getenv("SLUICE_TEST_BIND_STAGE")))
	}
	os.Exit(m.Run())
}

func childBind(path, stage string) int {
	unixHook = func(s string) {
		if s == stage {
			fmt.Println(s)
			io.Copy(io.Discard, os.Stdin)
		}
	}
	ln, err := listenUnix(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child bind:", err)
		return 2
	}
	ln.Close()
	fmt.Fprintf(os.Stderr, "child bind: stage %q never came\n", stage)
	return 1
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
