package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestDemotedMasterReadOnly turns the Redis a store talks to into a
// replica (REPLICAOF, as a failover does to the old master): its scripts
// answer READONLY. Each call must fail with ErrStoreUnavailable (so
// on_error applies), count nothing, and the Fallback must decide locally
// and go back to the store once the node is a master again.
func TestDemotedMasterReadOnly(t *testing.T) {
	srv := redistest.StartServer(t)
	other := redistest.StartServer(t)
	// fleet.OpenRedis's generous timeout: every call must be answered,
	// READONLY on the replica, which comes at once.
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{srv.Addr}})
	fb := fleet.NewFallback(rs, fleet.FallbackOptions{ExpectedInstances: 1, Probe: rs.Ping, ProbeInterval: 10 * time.Millisecond})
	t.Cleanup(fb.Close)
	ctx := context.Background()
	key := fmt.Sprintf("readonly-%d", time.Now().UnixNano())
	r := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: time.Now()}
	if _, err := fb.Take(ctx, r); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(other.Addr, ":")
	if _, err := redistest.Do(srv.Addr, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	// The replica keeps its data until it has synced with its master:
	// wait for the sync, so that the key is gone (other has none).
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, _ := redistest.Do(srv.Addr, "INFO", "replication")
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not replicate %s: %q", srv.Addr, other.Addr, info)
		}
		time.Sleep(10 * time.Millisecond) // a poll
	}
	_, err := rs.Take(ctx, r)
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Take on a replica: err = %v, want READONLY wrapping ErrStoreUnavailable", err)
	}
	for _, op := range []func() error{
		func() error { _, _, err := rs.SyncTake(ctx, r); return err },
		func() error {
			return rs.Sync(ctx, []redisstore.SyncOp{{Key: key, Algorithm: r.Algorithm, Limit: r.Limit, Hits: []redisstore.Hit{{At: r.Now.UnixMicro(), Cost: 1}}}})
		},
		func() error { _, err := rs.Lease(ctx, r, redisstore.ReturnOp{}); return err },
		func() error { return rs.TakeAll(ctx, []sluice.Request{r, r}, make([]sluice.Decision, 2)) },
	} {
		if err := op(); !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("a fleet call on a replica: err = %v, want ErrStoreUnavailable", err)
		}
	}
	if d, err := fb.Take(ctx, r); err != nil || !d.Allowed || fb.Mode() != fleet.ModeLocal {
		t.Fatalf("Fallback on a replica = %+v, %v, mode %v; want allowed locally", d, err, fb.Mode())
	}
	if n, _ := redistest.Do(srv.Addr, "EXISTS", rs.Key(key)); n != "0" {
		t.Fatalf("EXISTS %s on the replica = %q: a refused script wrote", rs.Key(key), n)
	}
	if _, err := redistest.Do(srv.Addr, "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := fb.Take(ctx, r); err == nil && fb.Mode() == fleet.ModeStore {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fallback mode %v 10s after the node became a master again, want store", fb.Mode())
		}
		time.Sleep(10 * time.Millisecond) // a poll
	}
}

// TestSentinelManualFailoverLease fails over (SENTINEL FAILOVER) while a
// Lease holds units: the old master lives on as a replica, so the store
// may meet READONLY before it hears of the new master. Every failure must
// wrap ErrStoreUnavailable, decisions must resume on the promoted replica,
// and the units held, counted on the old master and replicated (the
// replica at the master's offset), stay counted there: once Close gives
// back the rest, the new master counts exactly what was admitted.
func TestSentinelManualFailoverLease(t *testing.T) {
	t.Parallel() // Redis and Sentinels of its own, waiting out a failover
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinelFor(t, master, time.Second, []*redistest.Server{replica})
	rs := fleet.OpenRedis(t, redisstore.Options{Addrs: []string{sentinel}, Sentinel: "mymaster", Timeout: time.Second})
	l, err := fleet.NewLease(rs, fleet.LeaseOptions{Chunk: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Every call decides at now, and each write keeps the key for the rest
	// of now's window plus the expiry margin (10s), on Redis' clock: at the
	// window's start, an hour past each write. With time.Now() the key
	// could expire during the failover (tens of seconds) when the hour
	// ended meanwhile, and the promoted replica would count only the
	// grants taken after it (19 of 30).
	now := time.Now().Truncate(time.Hour)
	key := fmt.Sprintf("failover-lease-%d", time.Now().UnixNano())
	r := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1000), Cost: 1, Now: now}
	admitted := 0
	take := func() error {
		d, err := l.Take(ctx, r)
		if err == nil && d.Allowed {
			admitted++
		}
		return err
	}
	for range 3 { // cold, then a grant of 10: 8 held
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitReplicated(t, master, replica)
	// The Sentinel refuses (NOGOODSLAVE) until it has a fresh view of the
	// replica.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := redistest.Do(sentinel, "SENTINEL", "FAILOVER", "mymaster")
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "NOGOODSLAVE") || time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a poll
	}
	// Nothing is written meanwhile: writes the old master takes after the
	// promotion, before its demotion, are lost (asynchronous
	// replication; the README says so).
	for deadline := time.Now().Add(30 * time.Second); ; {
		nr, _ := redistest.Do(replica.Addr, "ROLE")
		or, _ := redistest.Do(master.Addr, "ROLE")
		if strings.HasPrefix(nr, "master") && strings.HasPrefix(or, "slave") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after SENTINEL FAILOVER: roles %q (replica), %q (old master)", nr, or)
		}
		time.Sleep(10 * time.Millisecond) // a poll
	}
	// The units held, then new grants: on the old master, now a replica,
	// until the store hears of the switch (READONLY), then on the new one.
	failed := 0
	for deadline := time.Now().Add(30 * time.Second); admitted < 30; {
		if err := take(); err != nil {
			failed++
			if !errors.Is(err, sluice.ErrStoreUnavailable) {
				t.Fatalf("Take during the failover: err = %v, want ErrStoreUnavailable", err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d admitted 30s after SENTINEL FAILOVER, want 30", admitted)
		}
	}
	if err := l.CloseAt(now); err != nil {
		t.Fatalf("CloseAt after the failover: %v", err)
	}
	if got := count(t, replica.Addr, rs.Key(key)); got != fmt.Sprint(admitted) {
		old, _ := redistest.Do(master.Addr, "GET", rs.Key(key))
		t.Fatalf("the promoted replica counts %s for the key, want %d (admitted; %d calls failed meanwhile); stats %+v; old master %q", got, admitted, failed, l.Stats(), old)
	}
	t.Logf("%d admitted, %d calls failed during the failover", admitted, failed)
}
