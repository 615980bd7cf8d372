package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestRunIDs: the servers' identity is stable while they run, changes when
// one restarts, and fails as unavailable while it is down.
func TestRunIDs(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	first, err := s.RunIDs(ctx)
	if err != nil || len(first) != 40 {
		t.Fatalf("RunIDs = %q, %v; want a 40-character run_id", first, err)
	}
	if again, err := s.RunIDs(ctx); err != nil || again != first {
		t.Fatalf("RunIDs again = %q, %v; want %q", again, err, first)
	}
	srv.Stop()
	if _, err := s.RunIDs(ctx); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("RunIDs with Redis stopped: %v, want ErrStoreUnavailable", err)
	}
	srv.Restart()
	var after string
	untilOK(t, "RunIDs after Restart", func() error { after, err = s.RunIDs(ctx); return err })
	if len(after) != 40 || after == first {
		t.Fatalf("RunIDs after a restart = %q, want a new run_id (was %q)", after, first)
	}
}

// TestRunIDsCluster: one run_id per master of a Cluster, with its address;
// a master that restarts changes them.
func TestRunIDsCluster(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	cl := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true})
	ctx := context.Background()
	ids, err := s.RunIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range cl.Addrs {
		if !strings.Contains(ids, addr+"=") {
			t.Errorf("RunIDs = %q: no run_id for %s", ids, addr)
		}
	}
	cl.Nodes[1].Stop()
	if _, err := s.RunIDs(ctx); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("RunIDs with a master stopped: %v, want ErrStoreUnavailable", err)
	}
	cl.Nodes[1].Restart()
	var after string
	untilOK(t, "RunIDs after the master's restart", func() error { after, err = s.RunIDs(ctx); return err })
	if after == ids {
		t.Fatalf("RunIDs after a master restarted = %q, unchanged", after)
	}
	for i, addr := range cl.Addrs {
		if changed := !strings.Contains(ids, addr+"="+runIDOf(after, addr)); changed != (i == 1) {
			t.Errorf("master %s: run_id changed %v, want %v (%q → %q)", addr, changed, i == 1, ids, after)
		}
	}
}

// runIDOf is addr's run_id in a RunIDs answer.
func runIDOf(ids, addr string) string {
	for f := range strings.FieldsSeq(ids) {
		if v, ok := strings.CutPrefix(f, addr+"="); ok {
			return v
		}
	}
	return ""
}

// TestRunIDsFirstCallAfterRestart: a Redis restarted while the store was
// idle closed its connections; the first RunIDs after it answers the new
// run_id. It once failed (EOF) once per client, so the daemon's watch,
// asking every second, saw a restart up to two seconds late (three with a
// failed ask while Redis was down), and the refusals it caches stood
// that long.
func TestRunIDsFirstCallAfterRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
	ctx := context.Background()
	first, err := s.RunIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	srv.Restart()
	after, err := s.RunIDs(ctx)
	if err != nil || len(after) != 40 || after == first {
		t.Fatalf("RunIDs, the first call after a restart = %q, %v; want a new run_id (was %q)", after, err, first)
	}
}
