package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// countedIn is how many units the shared store counts on r's key (a fixed
// window) at r.Now: the limit less what a query leaves.
func countedIn(t *testing.T, st *redisstore.Store, r sluice.Request) int64 {
	t.Helper()
	r.Cost = 0
	d, err := st.Take(context.Background(), r)
	if err != nil {
		t.Fatalf("query %q: %v", r.Key, err)
	}
	return r.Limit.Rate - d.Remaining
}

// gone selects the keys that start with "gone/".
func gone(_, key string) bool { return strings.HasPrefix(key, "gone/") }

// TestSyncForget: Forget sends the hits the keys it selects admitted
// locally, and only theirs, and lets those keys go; the others keep their
// view and their hits pending.
func TestSyncForget(t *testing.T) {
	srv := redistest.StartServer(t)
	store := openShared(t, []string{srv.Addr}, false)
	// An hour: no batch of the loop during the test.
	s := newSync(t, openShared(t, []string{srv.Addr}, false), fleet.SyncOptions{Interval: time.Hour})
	t0 := sluicetest.T0.Add(10 * time.Minute)
	ctx := context.Background()
	req := func(key string) sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: t0}
	}
	// Per key: the first decided in the store (cold), the second too
	// (the entry's first read), three locally.
	for _, key := range []string{"gone/a", "kept/b"} {
		for i := range 5 {
			if d, err := s.Take(ctx, req(key)); err != nil || !d.Allowed {
				t.Fatalf("Take %s #%d = %+v, %v; want allowed", key, i, d, err)
			}
		}
		if got := countedIn(t, store, req(key)); got != 2 {
			t.Fatalf("%s: the store counts %d before Forget, want 2 (3 hits pending)", key, got)
		}
	}
	before := s.Stats()
	if err := s.Forget(gone); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if got := countedIn(t, store, req("gone/a")); got != 5 {
		t.Errorf("gone/a: the store counts %d after Forget, want the 5 admitted", got)
	}
	if got := countedIn(t, store, req("kept/b")); got != 2 {
		t.Errorf("kept/b: the store counts %d after Forget, want still 2 (its hits wait for the batch)", got)
	}
	if st := s.Stats(); st.Keys != 1 {
		t.Errorf("Stats after Forget: %d keys, want 1 (kept/b)", st.Keys)
	}
	if d, err := s.Take(ctx, req("kept/b")); err != nil || !d.Allowed || d.Remaining != 94 {
		t.Errorf("Take kept/b after Forget = %+v, %v; want allowed, 94 left", d, err)
	}
	if st := s.Stats(); st.Loads != before.Loads || st.Local != before.Local+1 {
		t.Errorf("Stats after a decision of kept/b: %+v, before Forget %+v; want one more local decision, no load", st, before)
	}
	// A forgotten key starts over from the store.
	if d, err := s.Take(ctx, req("gone/a")); err != nil || !d.Allowed || d.Remaining != 94 {
		t.Errorf("Take gone/a after Forget = %+v, %v; want allowed, 94 left", d, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := countedIn(t, store, req("kept/b")); got != 6 {
		t.Errorf("kept/b: the store counts %d after Close, want the 6 admitted", got)
	}
	// Forget after Close does nothing.
	if err := s.Forget(gone); err != nil {
		t.Errorf("Forget after Close: %v", err)
	}
}

// TestLeaseForgetAt: ForgetAt gives back the units held for the keys it
// selects and still good at the time given, and lets those keys go; the
// others keep their units.
func TestLeaseForgetAt(t *testing.T) {
	srv := redistest.StartServer(t)
	store := openShared(t, []string{srv.Addr}, false)
	l, err := fleet.NewLease(openShared(t, []string{srv.Addr}, false), fleet.LeaseOptions{Chunk: 10})
	if err != nil {
		t.Fatal(err)
	}
	t0 := sluicetest.T0.Add(10 * time.Minute)
	ctx := context.Background()
	req := func(key string) sluice.Request {
		return sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: t0}
	}
	// Per key: the first decided in the store, the second reserves 10
	// and spends one: 11 counted, 9 held.
	for _, key := range []string{"gone/a", "kept/b"} {
		for i := range 2 {
			if d, err := l.Take(ctx, req(key)); err != nil || !d.Allowed {
				t.Fatalf("Take %s #%d = %+v, %v; want allowed", key, i, d, err)
			}
		}
	}
	if err := l.ForgetAt(t0.Add(time.Minute), gone); err != nil {
		t.Fatalf("ForgetAt: %v", err)
	}
	if got := countedIn(t, store, req("gone/a")); got != 2 {
		t.Errorf("gone/a: the store counts %d after ForgetAt, want the 2 admitted (9 units given back)", got)
	}
	if got := countedIn(t, store, req("kept/b")); got != 11 {
		t.Errorf("kept/b: the store counts %d after ForgetAt, want still 11", got)
	}
	if st := l.Stats(); st.Keys != 1 || st.Returned != 9 {
		t.Errorf("Stats after ForgetAt: %+v; want 1 key, 9 units returned", st)
	}
	calls := l.Stats().Calls
	if d, err := l.Take(ctx, req("kept/b")); err != nil || !d.Allowed {
		t.Errorf("Take kept/b after ForgetAt = %+v, %v; want allowed", d, err)
	}
	if c := l.Stats().Calls; c != calls {
		t.Errorf("Take kept/b after ForgetAt asked the store (%d calls, was %d): its units were still held", c, calls)
	}
	if err := l.CloseAt(t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := countedIn(t, store, req("kept/b")); got != 3 {
		t.Errorf("kept/b: the store counts %d after CloseAt, want the 3 admitted", got)
	}
}
