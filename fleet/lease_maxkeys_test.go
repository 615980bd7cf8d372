package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestLeaseMaxKeys: a Lease holding MaxKeys keys decides a new key in
// Redis, exactly, one script per decision, never over the limit, and
// counts it in Overflow; a TakeAll with such a key stays all-or-nothing;
// keys that hold nothing and were idle a period are let go for new ones.
func TestLeaseMaxKeys(t *testing.T) {
	if _, err := fleet.NewLease(nil, fleet.LeaseOptions{MaxKeys: -1}); err == nil {
		t.Error("NewLease with MaxKeys -1: no error")
	}
	srv := redistest.StartServer(t)
	st := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	l := newLease(t, st, fleet.LeaseOptions{MaxKeys: 2})
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Minute).Add(time.Minute) // a window's start: the test's times stay in it
	req := func(key string, cost int64, at time.Duration) sluice.Request {
		return sluice.Request{Key: "leasemax/" + key, Algorithm: sluice.FixedWindow, Limit: sluice.PerMinute(10), Cost: cost, Now: t0.Add(at)}
	}
	take := func(r sluice.Request) sluice.Decision {
		t.Helper()
		d, err := l.Take(ctx, r)
		if err != nil {
			t.Fatalf("Take %s: %v", r.Key, err)
		}
		return d
	}
	// A key's first request in a second is cold: decided in Redis
	// (here of cost 0, counting nothing); the next makes it an entry.
	take(req("a", 0, 0))
	take(req("b", 0, 0))
	take(req("a", 1, 0))
	take(req("b", 1, 0))
	take(req("a", 1, 0))
	if got := l.Stats(); got.Keys != 2 || got.Overflow != 0 || got.Cold != 2 {
		t.Fatalf("after a and b: %d keys held, overflow %d, cold %d; want 2, 0 and 2", got.Keys, got.Overflow, got.Cold)
	}

	// c is new with two keys held (each with units reserved): decided in
	// Redis, one script a decision, exactly: 10 of 12 admitted (the first
	// as a cold key, the others beyond MaxKeys).
	before := scriptCalls(t, srv.Addr)
	admitted := 0
	for range 12 {
		if take(req("c", 1, time.Second)).Allowed {
			admitted++
		}
	}
	if got := scriptCalls(t, srv.Addr) - before; got != 12 {
		t.Errorf("12 decisions of c beyond MaxKeys ran %d scripts, want 12 (one round trip each)", got)
	}
	if admitted != 10 {
		t.Errorf("c admitted %d of 12 at 10/minute in Redis; want 10", admitted)
	}
	if got := l.Stats(); got.Keys != 2 || got.Overflow != 11 || got.Cold != 3 {
		t.Errorf("after c: %d keys held, overflow %d, cold %d; want 2, 11 and 3", got.Keys, got.Overflow, got.Cold)
	}

	// A TakeAll of a (held, units left) and c (over its limit, not held)
	// denies both and spends nothing of a.
	rs := []sluice.Request{req("a", 1, 2*time.Second), req("c", 1, 2*time.Second)}
	ds := make([]sluice.Decision, 2)
	if err := l.TakeAll(ctx, rs, ds); err != nil {
		t.Fatal(err)
	}
	if ds[1].Allowed {
		t.Fatalf("TakeAll(a, c) = %+v; want c denied", ds)
	}
	spent := l.Stats().Spent
	if spent != 3 {
		t.Errorf("units spent after the TakeAll: %d; want 3 (a twice, b once)", spent)
	}
	if got := l.Stats(); got.Overflow != 12 {
		t.Errorf("overflow %d after the TakeAll, want 12", got.Overflow)
	}

	// Two minutes later a's and b's units expired with their window and
	// both were idle a period: they are let go, and a new key is held
	// again.
	later := req("d", 1, 2*time.Minute+3*time.Second)
	for range 2 { // cold, then held
		if d := take(later); !d.Allowed {
			t.Fatalf("d in the next window: %+v", d)
		}
	}
	if got := l.Stats(); got.Keys != 1 || got.Overflow != 12 {
		t.Errorf("d after a and b went idle: %d keys held, overflow %d; want 1 (d) and 12", got.Keys, got.Overflow)
	}
}
