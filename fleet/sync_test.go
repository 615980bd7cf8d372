package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// openRedis returns a store on addrs, closed when the test ends; its
// timeout is generous for a loaded machine under -race.
func openShared(t testing.TB, addrs []string, cluster bool) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(context.Background(), redisstore.Options{Addrs: addrs, Cluster: cluster, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("redisstore.New(%v): %v", addrs, err)
	}
	t.Cleanup(s.Close)
	return s
}

func newSync(t testing.TB, inner fleet.SyncStore, o fleet.SyncOptions) *fleet.Sync {
	t.Helper()
	s, err := fleet.NewSync(inner, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// A single instance decides exactly as the shared store: its view is the
// store's count plus its own hits. The whole suite runs, algorithms Sync
// does not handle going through to Redis.
func TestSyncConformance(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: 20 * time.Millisecond})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
	if st := s.Stats(); st.Local == 0 || st.Batches == 0 {
		t.Errorf("Stats = %+v: want local decisions and batches", st)
	}
}

func TestSyncConformanceCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	s := newSync(t, openShared(t, c.Addrs, true), fleet.SyncOptions{Interval: 20 * time.Millisecond})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
}
