package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestClusterSlotMigration moves a key's slot to another master (CLUSTER
// SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while decisions on
// the key go on: the client follows ASK and MOVED, and the count goes on
// exactly on the new master: every admitted decision, synced hit and
// granted lease unit counted once, and beyond them at most the calls that
// failed.
func TestClusterSlotMigration(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	c := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: c.Addrs, Cluster: true})
	ctx := context.Background()
	const key = "migrating"
	req := sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(1 << 30), Cost: 1, Now: sluicetest.T0}
	do := func(addr string, args ...string) string {
		t.Helper()
		v, err := redistest.Do(addr, args...)
		if err != nil {
			t.Fatalf("%s %v: %v", addr, args, err)
		}
		return v
	}
	slot := do(c.Addrs[0], "CLUSTER", "KEYSLOT", s.Key(key))
	ids := make([]string, len(c.Addrs))
	src, dst := -1, -1
	for i, a := range c.Addrs {
		ids[i] = do(a, "CLUSTER", "MYID")
		if _, err := redistest.Do(a, "EXISTS", s.Key(key)); err == nil {
			src = i // the others answer MOVED
		}
	}
	if src < 0 {
		t.Fatal("no node owns the key's slot")
	}
	dst = (src + 1) % len(c.Addrs)
	var (
		ok, failed atomic.Int64
		stop       atomic.Bool
		wg         sync.WaitGroup
		lastErr    atomic.Value
	)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				d, err := s.Take(ctx, req)
				switch {
				case err != nil:
					failed.Add(1)
					lastErr.Store(err.Error())
					if !errors.Is(err, sluice.ErrStoreUnavailable) {
						t.Errorf("Take during the migration: %v, want ErrStoreUnavailable", err)
					}
				case !d.Allowed:
					t.Errorf("Take during the migration denied: %+v", d)
				default:
					ok.Add(1)
				}
			}
		})
	}
	// Sync batches on the same key, as fleet.Sync sends them: an op that
	// fails is sent again as it was, until it succeeds; each counts once.
	var synced, syncFailed atomic.Int64
	wg.Go(func() {
		for seq := uint64(1); !stop.Load(); seq++ {
			op := redisstore.SyncOp{Key: key, Algorithm: req.Algorithm, Limit: req.Limit, Writer: "migration", Seq: seq,
				Hits: []redisstore.Hit{{At: req.Now.UnixMicro(), Cost: 1}}}
			for {
				ops := []redisstore.SyncOp{op}
				if err := s.Sync(ctx, ops); err == nil {
					break
				}
				syncFailed.Add(1)
			}
			synced.Add(1)
		}
	})
	// Lease grants of one unit on the same key, as fleet.Lease asks them:
	// each granted unit counted once; a grant that failed may have run.
	var granted, leaseFailed atomic.Int64
	wg.Go(func() {
		for !stop.Load() {
			g, err := s.Lease(ctx, req, redisstore.ReturnOp{})
			if err != nil {
				leaseFailed.Add(1)
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("Lease during the migration: %v, want ErrStoreUnavailable", err)
				}
				continue
			}
			if g.Units != 1 {
				t.Errorf("Lease during the migration granted %d units, want 1", g.Units)
			}
			granted.Add(g.Units)
		}
	})
	progress := func() { // wait for 50 more decisions
		t.Helper()
		want := ok.Load() + 50
		for deadline := time.Now().Add(30 * time.Second); ok.Load() < want; {
			if time.Now().After(deadline) {
				t.Fatalf("decisions stalled at %d (%d failed, last %v)", ok.Load(), failed.Load(), lastErr.Load())
			}
			time.Sleep(time.Millisecond) // a poll
		}
	}
	progress()
	do(c.Addrs[dst], "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
	do(c.Addrs[src], "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
	progress()
	host, port, _ := strings.Cut(c.Addrs[dst], ":")
	keys := strings.Fields(do(c.Addrs[src], "CLUSTER", "GETKEYSINSLOT", slot, "100"))
	if len(keys) == 0 {
		t.Fatalf("no key in slot %s on %s", slot, c.Addrs[src])
	}
	do(c.Addrs[src], append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)...)
	progress() // on the new master, by ASK
	for _, i := range []int{dst, src, 3 - src - dst} {
		do(c.Addrs[i], "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
	}
	progress() // on the new master, by MOVED
	stop.Store(true)
	wg.Wait()
	v := do(c.Addrs[dst], "GET", s.Key(key))
	var w, n, m int64
	if _, err := fmt.Sscan(v, &w, &n, &m); err != nil {
		t.Fatalf("GET %s on the new master = %q: %v", s.Key(key), v, err)
	}
	counted := ok.Load() + synced.Load() + granted.Load()
	if n < counted || n > counted+failed.Load()+leaseFailed.Load() {
		t.Fatalf("the new master counts %d; %d admitted, %d synced and %d granted (each once), %d Takes and %d grants failed: want between", n, ok.Load(), synced.Load(), granted.Load(), failed.Load(), leaseFailed.Load())
	}
	t.Logf("slot %s moved from %s to %s: %d admitted, %d synced (%d batches sent again), %d granted (%d grants failed), %d failed (last %v), %d counted", slot, c.Addrs[src], c.Addrs[dst], ok.Load(), synced.Load(), syncFailed.Load(), granted.Load(), leaseFailed.Load(), failed.Load(), lastErr.Load(), n)
}
