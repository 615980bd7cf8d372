package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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

// TestRunIDsCluster: one run_id per master of a Cluster, with its address.
func TestRunIDsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true})
	ids, err := s.RunIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range cl.Addrs {
		if !strings.Contains(ids, addr+"=") {
			t.Errorf("RunIDs = %q: no run_id for %s", ids, addr)
		}
	}
}
