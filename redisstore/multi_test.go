package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// calls is how many times Redis at addr has run the command name
// (INFO commandstats: cmdstat_NAME), 0 if never.
func calls(t *testing.T, addr, name string) int64 {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q", line)
			}
			return v
		}
	}
	return 0
}

// syncOp is one hit on key, for Sync.
func syncOp(key string) redisstore.SyncOp {
	return redisstore.SyncOp{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Hits: []redisstore.Hit{{At: sluicetest.T0.UnixMicro(), Cost: 1}}}
}

// TestSyncOneRoundTrip: a batch is its scripts, pipelined: no SCRIPT LOAD
// of the whole script before each (the script is loaded once, on its
// first NOSCRIPT).
func TestSyncOneRoundTrip(t *testing.T) {
	srv := redistest.StartServer(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	for i := range 10 {
		if err := s.Sync(ctx, []redisstore.SyncOp{syncOp("a"), syncOp("b")}); err != nil {
			t.Fatalf("Sync %d: %v", i, err)
		}
		back := redisstore.ReturnOp{Key: "a", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Units: 0, Now: sluicetest.T0}
		if err := s.Return(ctx, []redisstore.ReturnOp{back}); err != nil {
			t.Fatalf("Return %d: %v", i, err)
		}
	}
	if n := calls(t, srv.Addr, "script|load"); n > 1 {
		t.Errorf("SCRIPT LOAD ran %d times for 10 batches and 10 give-backs, want at most once", n)
	}
	if n := calls(t, srv.Addr, "evalsha"); n < 30 {
		t.Errorf("EVALSHA ran %d times, want the 30 scripts", n)
	}
}

// TestSyncClusterNodeDown: with one master of a Cluster stopped, a batch
// still runs the ops of the keys on the other masters, and fails only
// those of the stopped one; a give-back of lease units likewise.
func TestSyncClusterNodeDown(t *testing.T) {
	t.Parallel() // a Cluster of its own: its start overlaps another test
	cl := redistest.StartCluster(t)
	s := open(t, redisstore.Options{Addrs: cl.Addrs, Cluster: true})
	ctx := context.Background()
	ops := make([]redisstore.SyncOp, 12)
	for i := range ops {
		ops[i] = syncOp(fmt.Sprint("down/", i))
	}
	if err := s.Sync(ctx, ops); err != nil {
		t.Fatal(err)
	}
	// A lease of 3 units on each key, to give back with the master down.
	backs := make([]redisstore.ReturnOp, len(ops))
	for i, op := range ops {
		r := sluice.Request{Key: op.Key, Algorithm: op.Algorithm, Limit: op.Limit, Cost: 3, Now: sluicetest.T0}
		g, err := s.Lease(ctx, r, redisstore.ReturnOp{})
		if err != nil || g.Units != 3 {
			t.Fatalf("Lease(%s) = %+v, %v; want 3 units", op.Key, g, err)
		}
		backs[i] = redisstore.ReturnOp{Key: op.Key, Algorithm: op.Algorithm, Limit: op.Limit, Units: 3, Window: g.State.T, Now: sluicetest.T0}
	}
	down := cl.Nodes[1]
	onDown := make([]bool, len(ops))
	n := 0
	for i := range ops {
		got, err := redistest.Do(down.Addr, "EXISTS", s.Key(ops[i].Key))
		onDown[i] = err == nil && got == "1"
		if onDown[i] {
			n++
		}
	}
	if n == 0 || n == len(ops) {
		t.Fatalf("%d of %d keys on the master to stop, want some but not all", n, len(ops))
	}
	down.Stop()
	if err := s.Sync(ctx, ops); err == nil {
		t.Fatal("Sync with a master stopped succeeded")
	}
	for i, op := range ops {
		if onDown[i] != (op.Err != nil) {
			t.Errorf("key %d (on the stopped master: %v): Err = %v", i, onDown[i], op.Err)
		}
		if !onDown[i] && op.State.N != 5 {
			t.Errorf("key %d on a live master: count %d after the second batch, want 5 (2 hits, 3 units leased)", i, op.State.N)
		}
	}
	err := s.Return(ctx, backs)
	for i, op := range ops {
		if named := err != nil && strings.Contains(err.Error(), fmt.Sprintf("%q", s.Key(op.Key))); named != onDown[i] {
			t.Errorf("key %d (on the stopped master: %v): Return's error names it: %v (%v)", i, onDown[i], named, err)
		}
		if onDown[i] {
			continue
		}
		if got, err := redistest.Do(nodeOf(t, cl, s, op.Key), "GET", s.Key(op.Key)); err != nil || !strings.HasSuffix(got, " 2 0") {
			t.Errorf("key %d on a live master after the give-back: %q, %v; want a count of 2", i, got, err)
		}
	}
}

// nodeOf is the address of the master that holds key.
func nodeOf(t *testing.T, cl *redistest.Cluster, s *redisstore.Store, key string) string {
	t.Helper()
	for _, a := range cl.Addrs {
		if got, err := redistest.Do(a, "EXISTS", s.Key(key)); err == nil && got == "1" {
			return a
		}
	}
	t.Fatalf("%s on no live master", key)
	return ""
}
