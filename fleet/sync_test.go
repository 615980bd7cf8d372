package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// openShared returns a store on addrs (a Cluster's when cluster), closed
// when the test ends.
func openShared(t testing.TB, addrs []string, cluster bool) *redisstore.Store {
	t.Helper()
	return fleet.OpenRedis(t, redisstore.Options{Addrs: addrs, Cluster: cluster})
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
	t.Parallel() // a Cluster (or Redis) and stores of its own
	c := redistest.StartCluster(t)
	s := newSync(t, openShared(t, c.Addrs, true), fleet.SyncOptions{Interval: 20 * time.Millisecond})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
}

// TestSyncRedisOutage stops a real redis-server under a Sync: decisions go
// on locally while the view is fresh, a batch fails, and so does a
// decision on a view two intervals old, each with
// sluice.ErrStoreUnavailable (so store.on_error applies); once Redis is
// back (empty: no persistence) the hits made meanwhile reach it, once,
// with the next batch. The interval is an hour, the batches are Flush's
// and the view is aged by Age, so that no step depends on how long
// stopping the server takes (TestSyncStaleView times the two intervals,
// on synctest's clock, over a store in memory). It ran on a 500ms
// interval, and two intervals had to outlast stopping the server, or no
// decision after the stop was local and the test failed.
func TestSyncRedisOutage(t *testing.T) {
	srv := redistest.StartServer(t)
	const iv = time.Hour // batches by Flush only
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: iv})
	ctx := context.Background()
	r := sluice.Request{Key: fmt.Sprintf("outage/%d", time.Now().UnixNano()), Algorithm: sluice.GCRA, Limit: sluice.PerHour(1000), Cost: 1}
	take := func() error {
		r.Now = time.Now()
		d, err := s.Take(ctx, r)
		if err == nil && !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		return err
	}
	first := time.Now()
	for range 2 { // the first is cold, decided in Redis; the second reads the key
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Keys != 1 || st.Local != 0 {
		t.Fatalf("Stats = %+v after two requests, want the key an entry and no local decision yet", st)
	}
	srv.Stop()
	const local = 500
	for i := range local {
		if err := take(); err != nil {
			t.Fatalf("decision %d after the stop, on a fresh view: %v, want it local", i, err)
		}
	}
	if st := s.Stats(); st.Local != local {
		t.Fatalf("Stats = %+v after %d decisions with Redis stopped, want them all local", st, local)
	}
	if err := s.Flush(); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("a batch with Redis stopped: %v, want ErrStoreUnavailable", err)
	}
	s.Age(2 * iv)
	if err := take(); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("a decision on a view two intervals old with Redis stopped: %v, want ErrStoreUnavailable", err)
	}
	srv.Restart()
	// The hits made while Redis was down go out with the next batch; the
	// store's client may fail a call before it sees its connection gone,
	// and a failed batch keeps its hits for the next.
	for deadline := time.Now().Add(time.Minute); ; {
		err := s.Flush()
		if err == nil {
			break
		}
		if !errors.Is(err, sluice.ErrStoreUnavailable) || time.Now().After(deadline) {
			t.Fatalf("a batch after the restart: %v, want it sent (the last of its failures a minute after the restart)", err)
		}
	}
	q := r
	q.Cost, q.Now = 0, time.Now()
	d, err := openShared(t, []string{srv.Addr}, false).Take(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	// The bucket refills 1000/h meanwhile: one token per 3.6s.
	low := int64(1000 - local)
	high := low + int64(time.Since(first)/(3600*time.Millisecond)) + 1
	if d.Remaining < low || d.Remaining > high {
		t.Errorf("after the restart and a batch: Remaining %d, want %d to %d (the %d local hits counted once)", d.Remaining, low, high, local)
	}
}

// TestSyncColdConcurrent asks one instance for a fresh key from many
// goroutines at once: the first requests are cold (decided in Redis) and
// one makes the key an entry while they are still on their way. The view
// must be read after them, or it would miss their hits and a single
// instance would pass the limit: it must admit exactly the limit.
func TestSyncColdConcurrent(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	ctx := context.Background()
	const limit, n = 10, 40
	for round := range 25 {
		r := sluice.Request{Key: fmt.Sprintf("cold/%d/%d", time.Now().UnixNano(), round), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(limit), Cost: 1, Now: sluicetest.T0}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				d, err := s.Take(ctx, r)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != limit {
			t.Fatalf("round %d: %d concurrent requests of a fresh key admitted %d, want exactly the limit %d", round, n, got, limit)
		}
	}
	if st := s.Stats(); st.Cold == 0 || st.Local == 0 {
		t.Errorf("Stats = %+v: want cold and local decisions", st)
	}
}
