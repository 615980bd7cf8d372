package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSyncFlushClusterNodeDown: a batch on a 3-master Cluster with one
// master stopped fails half-way: the keys on the other masters are
// applied, those on the stopped one are not. Each hit must count once: the
// applied keys are not sent again once the master is back, and the others'
// hits reach it (restarted without persistence: only the hits since the
// last batch it had).
func TestSyncFlushClusterNodeDown(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and stores of its own
	cl := redistest.StartCluster(t)
	rs := openShared(t, cl.Addrs, true)
	s := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour}) // batches only when flushed
	ctx := context.Background()
	const keys = 12
	// One instant, at an hour's start: on the clock, an hour ending during
	// the test (seconds: a master stops and restarts) moved the keys'
	// window, and the counts it reads were of the new one.
	t0 := time.Now().Truncate(time.Hour)
	req := func(i int) sluice.Request {
		return sluice.Request{Key: fmt.Sprint("half/", i), Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1000), Cost: 1, Now: t0}
	}
	takeAll := func(n int) {
		t.Helper()
		for i := range keys {
			for range n {
				if d, err := s.Take(ctx, req(i)); err != nil || !d.Allowed {
					t.Fatalf("Take(%d) = %+v, %v; want allowed", i, d, err)
				}
			}
		}
	}
	takeAll(4) // the first is decided in Redis, the second reads the key, the others are local
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Which master holds each key.
	node := make([]*redistest.Server, keys)
	for i := range keys {
		for _, n := range cl.Nodes {
			if got, err := redistest.Do(n.Addr, "EXISTS", rs.Key(req(i).Key)); err == nil && got == "1" {
				node[i] = n
			}
		}
		if node[i] == nil {
			t.Fatalf("key %d on no master after a batch", i)
		}
		if got := count(t, node[i].Addr, rs.Key(req(i).Key)); got != "4" {
			t.Fatalf("key %d: Redis counts %s after the first batch, want 4", i, got)
		}
	}
	down := node[0]
	onDown := 0
	for i := range keys {
		if node[i] == down {
			onDown++
		}
	}
	if onDown == keys {
		t.Fatal("every key on one master: nothing to apply half-way")
	}
	if st := s.Stats(); st.Local != 2*keys {
		t.Fatalf("Stats.Local = %d, want %d", st.Local, 2*keys)
	}
	takeAll(3)
	down.Stop()
	if err := s.Flush(); err == nil {
		t.Fatal("Flush with a master stopped succeeded")
	}
	// The keys on the live masters are applied, once.
	for i := range keys {
		if node[i] != down {
			if got := count(t, node[i].Addr, rs.Key(req(i).Key)); got != "7" {
				t.Errorf("key %d on a live master: Redis counts %s after the half-failed batch, want 7", i, got)
			}
		}
	}
	down.Restart()
	untilFlushed(t, s)
	if err := s.Flush(); err != nil {
		t.Fatalf("Flush after recovery: %v", err)
	}
	for i := range keys {
		want := "7"
		if node[i] == down {
			want = "3" // its data is gone; the hits it had not received arrive
		}
		if got := count(t, node[i].Addr, rs.Key(req(i).Key)); got != want {
			t.Errorf("key %d (on the stopped master: %v): Redis counts %s, want %s", i, node[i] == down, got, want)
		}
	}
}
