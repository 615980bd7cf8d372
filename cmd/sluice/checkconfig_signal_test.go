package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestCheckConfigStopsOnSignal: check-config reading a file that does not
// end (sluice check-config /dev/stdin, a pipe whose writer is still
// there) stops at the first SIGINT or SIGTERM, as serve's shutdown
// begins at it, rather than waiting for a second signal.
func TestCheckConfigStopsOnSignal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Closed at the end: the read still blocked on it ends.
	defer w.Close()
	path := fmt.Sprintf("/dev/fd/%d", r.Fd())
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal, as main's onSignals cancels
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := run(ctx, []string{"check-config", path}, nil, &stdout, &stderr)
		done <- result{code, stdout.String(), stderr.String()}
	}()
	select {
	case res := <-done:
		if res.code != 1 || res.stdout != "" || !strings.Contains(res.stderr, "interrupted") || !strings.Contains(res.stderr, path) {
			t.Errorf("check-config interrupted = exit %d, stdout %q, stderr %q; want 1 and a line naming %s interrupted", res.code, res.stdout, res.stderr, path)
		}
	case <-time.After(time.Minute):
		t.Fatal("check-config still reading a pipe a minute after its context was cancelled")
	}
}
