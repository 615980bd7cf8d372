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
	c := redistest.StartCluster(t)
	s := newSync(t, openShared(t, c.Addrs, true), fleet.SyncOptions{Interval: 20 * time.Millisecond})
	sluicetest.Run(t, func(*testing.T) sluice.Store { return s })
}

// TestSyncRedisOutage stops a real redis-server under a Sync: decisions go
// on locally for two intervals, then wait for the batch in flight (at most
// the store's timeout) and fail with sluice.ErrStoreUnavailable (so
// store.on_error applies); once Redis is back (empty: no persistence) the
// hits made meanwhile reach it.
func TestSyncRedisOutage(t *testing.T) {
	srv := redistest.StartServer(t)
	const iv = 500 * time.Millisecond // two intervals outlast stopping the server
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
	// The first request is cold, decided in Redis; the next reads the key
	// (asked again until it holds it: on a slow machine two intervals may
	// pass between two requests).
	for s.Stats().Keys == 0 {
		if err := take(); err != nil {
			t.Fatal(err)
		}
		if time.Since(first) > time.Minute {
			t.Fatal("the key never became an entry")
		}
	}
	srv.Stop()
	stopped := time.Now()
	local := 0
	for {
		err := take()
		if err != nil {
			if !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Fatalf("after the stop: %v, want ErrStoreUnavailable", err)
			}
			break
		}
		local++
		if time.Since(stopped) > time.Minute {
			t.Fatal("decisions still local a minute after Redis stopped")
		}
		if local < 500 {
			continue
		}
		time.Sleep(iv / 10) // the limit is 1000: pace the rest
	}
	if local == 0 {
		t.Fatal("no local decision after the stop, want decisions for up to two intervals")
	}
	t.Logf("%d local decisions, then an error after %v", local, time.Since(stopped))
	srv.Restart()
	t.Logf("restarted after %v", time.Since(stopped))
	// The hits made while Redis was down go out with the next batches.
	q := r
	q.Cost = 0
	for deadline := time.Now().Add(time.Minute); ; {
		rs := openShared(t, []string{srv.Addr}, false)
		q.Now = time.Now()
		d, err := rs.Take(ctx, q)
		// The bucket refills 1000/h meanwhile: one token per 3.6s.
		want := 1000 - int64(local) + int64(time.Since(first)/(3600*time.Millisecond)) + 1
		if err == nil && d.Remaining <= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the restart: Remaining %d, %v; want at most %d (the %d local hits sent)", d.Remaining, err, want, local)
		}
		time.Sleep(iv) // waiting for the Sync's next batch
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
