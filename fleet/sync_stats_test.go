package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestSyncStatsDecisions: each decision counts once in SyncStats, where it
// was made. A key's first request is cold (decided in the store), its
// second is decided in the store too by the entry's first read (a load),
// the rest locally: Local counts only those, as the store's count shows.
func TestSyncStatsDecisions(t *testing.T) {
	srv := redistest.StartServer(t)
	store := openShared(t, []string{srv.Addr}, false)
	// An hour: no batch of the loop during the test.
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: sluicetest.T0.Add(10 * time.Minute)}
	for i := range 5 {
		if d, err := s.Take(context.Background(), r); err != nil || !d.Allowed {
			t.Fatalf("Take #%d = %+v, %v; want allowed", i, d, err)
		}
	}
	inStore := countedIn(t, store, r)
	st := s.Stats()
	if inStore != 2 || st.Cold != 1 || st.Loads != 1 {
		t.Fatalf("the store counts %d, Stats %+v; want 2 decided there: one cold, one load", inStore, st)
	}
	if st.Local != 5-uint64(inStore) {
		t.Errorf("Stats.Local = %d after 5 decisions, %d of them made in the store; want %d", st.Local, inStore, 5-inStore)
	}
}

// TestSyncOvershootMeasured: two instances that each decide from a stale
// view admit past the limit; the batch that brings the fleet's count to
// Redis finds the key over its limit by exactly what the fleet admitted
// beyond it, and MaxOvershoot keeps the most seen.
func TestSyncOvershootMeasured(t *testing.T) {
	srv := redistest.StartServer(t)
	store := openShared(t, []string{srv.Addr}, false)
	// An hour: batches only when the test flushes.
	a := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	b := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	ctx := context.Background()
	r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0.Add(10 * time.Minute)}
	admitted := 0
	take := func(s *fleet.Sync, n int) {
		for range n {
			d, err := s.Take(ctx, r)
			if err != nil {
				t.Fatalf("Take: %v", err)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	// Each: a cold decision and the entry's first read, in Redis (4
	// counted), then local decisions on views of 3 and 4 that stop at 10:
	// 7 and 6 more.
	take(a, 1)
	take(b, 1)
	take(a, 1)
	take(b, 1)
	take(a, 10)
	take(b, 10)
	if admitted != 17 {
		t.Fatalf("admitted %d, want 17 (4 in Redis, 7 and 6 on views of 3 and 4)", admitted)
	}
	if st := a.Stats(); st.MaxOvershoot != 0 {
		t.Fatalf("a before any batch: MaxOvershoot %d, want 0", st.MaxOvershoot)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := countedIn(t, store, r); got != 10 {
		t.Fatalf("Redis counts %d (at most the limit shows), want 10", got)
	}
	// a's batch found 4 + 7 = 11 (1 over), b's 17 (7 over).
	if st := a.Stats(); st.Overshoot != 1 || st.MaxOvershoot != 1 {
		t.Errorf("a: Overshoot %d, MaxOvershoot %d; want 1 and 1 (its batch found 11 of 10)", st.Overshoot, st.MaxOvershoot)
	}
	if st := b.Stats(); st.Overshoot != 7 || st.MaxOvershoot != int64(admitted-10) {
		t.Errorf("b: Overshoot %d, MaxOvershoot %d; want 7 and %d, what the fleet admitted past the limit", st.Overshoot, st.MaxOvershoot, admitted-10)
	}
}

// TestSyncOvershootReports: a report (Request.Force) charged past the
// limit shows in the overshoot too, as documented: the store's count
// cannot tell it from the fleet's error.
func TestSyncOvershootReports(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	ctx := context.Background()
	r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(10), Cost: 1, Now: sluicetest.T0.Add(10 * time.Minute)}
	for i := range 10 {
		if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("Take #%d = %+v, %v; want allowed", i, d, err)
		}
	}
	rep := r
	rep.Cost, rep.Force = 5, true
	if _, err := s.Take(ctx, rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.MaxOvershoot != 5 {
		t.Errorf("one instance, a report of 5 past the limit: MaxOvershoot %d, want 5", st.MaxOvershoot)
	}
}

// TestSyncBatchKeysAfterLostReply: a batch counts its keys, once each,
// also when a key sends the ops of a batch whose reply was lost again
// beside its new hits (two ops, one key).
func TestSyncBatchKeysAfterLostReply(t *testing.T) {
	srv := redistest.StartServer(t)
	key := fmt.Sprintf("batchkeys-%d", time.Now().UnixNano())
	cut := redistest.NewCutter(t, srv.Addr, key, false)
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{cut.Addr}})
	var mu sync.Mutex
	var sizes []int // of the batches that succeeded
	s := newSync(t, rs, fleet.SyncOptions{Interval: time.Hour, OnBatch: func(keys int, _ time.Duration, err error) {
		if err == nil {
			mu.Lock()
			sizes = append(sizes, keys)
			mu.Unlock()
		}
	}})
	ctx := context.Background()
	r := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1000), Cost: 1}
	take := func(n int) {
		for i := range n {
			r.Now = time.Now()
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("Take %d = %+v, %v; want allowed", i, d, err)
			}
		}
	}
	take(5) // cold, first read, 3 local hits
	cut.Arm()
	if err := s.Flush(); err == nil {
		t.Fatal("Flush whose reply was lost succeeded")
	}
	if !cut.Cut() {
		t.Fatal("the batch's reply was not lost: the test did not cut")
	}
	take(2) // new hits beside the ops in doubt
	before := s.Stats()
	untilFlushed(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 || sizes[0] != 1 {
		t.Errorf("OnBatch of the batches that succeeded got keys %v, want [1]: one key, its ops in doubt and its new hits", sizes)
	}
	after := s.Stats()
	if keys, batches := after.BatchKeys-before.BatchKeys, after.Batches-before.Batches; keys != batches {
		t.Errorf("BatchKeys grew by %d over %d batches of one key each, want %d", keys, batches, batches)
	}
}
