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

// TestSyncMaxKeys: a Sync holding MaxKeys keys decides a new key in Redis,
// exactly, one script per decision, and counts it in Overflow; a TakeAll
// with such a key stays all-or-nothing. That idle keys age out and make
// room is TestSyncMaxKeysAgeOut's, on a fake clock.
func TestSyncMaxKeys(t *testing.T) {
	if _, err := fleet.NewSync(nil, fleet.SyncOptions{Interval: time.Second, MaxKeys: -1}); err == nil {
		t.Error("NewSync with MaxKeys -1: no error")
	}
	srv := redistest.StartServer(t)
	st := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	s, err := fleet.NewSync(st, fleet.SyncOptions{Interval: time.Hour, MaxKeys: 2}) // the loop never fires
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	ref := sluicetest.NewReference()
	req := func(key string, cost int64, i int) sluice.Request {
		return sluice.Request{Key: "maxkeys/" + key, Algorithm: sluice.TokenBucket, Limit: sluice.PerHour(10), Cost: cost, Now: sluicetest.T0.Add(time.Duration(i) * time.Millisecond)}
	}
	same := func(r sluice.Request) {
		t.Helper()
		want, err := ref.Take(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Take(ctx, r)
		if err != nil {
			t.Fatalf("Take %s: %v", r.Key, err)
		}
		if got != want {
			t.Fatalf("Take %s = %+v, want %+v", r.Key, got, want)
		}
	}
	// Each key's first request is cold (decided in Redis), the second
	// makes it an entry.
	same(req("a", 1, 0))
	same(req("b", 1, 1))
	same(req("a", 1, 2))
	same(req("b", 1, 2))
	if got := s.Stats(); got.Keys != 2 || got.Overflow != 0 || got.Cold != 2 {
		t.Fatalf("after a and b: %d keys held, overflow %d, cold %d; want 2, 0 and 2", got.Keys, got.Overflow, got.Cold)
	}
	before := scriptCalls(t, srv.Addr)
	for i := range 3 {
		same(req("c", 1, 3+i))
	}
	if got := scriptCalls(t, srv.Addr) - before; got != 3 {
		t.Errorf("3 decisions of c beyond MaxKeys ran %d scripts, want 3 (exact, one round trip each)", got)
	}
	if got := s.Stats(); got.Keys != 2 || got.Overflow != 2 || got.Cold != 3 {
		t.Errorf("after c: %d keys held, overflow %d, cold %d; want 2, 2 (c's first is cold) and 3", got.Keys, got.Overflow, got.Cold)
	}
	// c's count is in Redis already: nothing of it waits for a batch.
	if d, err := st.Take(ctx, req("c", 0, 6)); err != nil || d.Remaining != 7 {
		t.Errorf("c in Redis: remaining %d (%v), want 7", d.Remaining, err)
	}

	// d, not held, is spent in Redis; a TakeAll of a (held) and d denies
	// both and counts neither.
	for i := range 10 {
		r := req("d", 1, 10+i)
		if _, err := st.Take(ctx, r); err != nil {
			t.Fatal(err)
		}
		ref.Take(ctx, r)
	}
	rs := []sluice.Request{req("a", 1, 30), req("d", 1, 30)}
	got, want := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
	if err := s.TakeAll(ctx, rs, got); err != nil {
		t.Fatal(err)
	}
	if err := ref.TakeAll(ctx, rs, want); err != nil {
		t.Fatal(err)
	}
	if got[0] != want[0] || got[1] != want[1] || got[1].Allowed {
		t.Fatalf("TakeAll(a, d) = %+v, want %+v (d denied)", got, want)
	}
	same(req("a", 0, 31)) // a was not charged
	if got := s.Stats(); got.Overflow != 3 {
		t.Errorf("overflow %d after the TakeAll, want 3", got.Overflow)
	}
}
