package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMastersAfterFailedSlotRead connects to a real Cluster while reading
// its slot map fails: Masters is 1 then (nothing is known), and must
// become 3 once the map can be read, without a restart. It stayed 1 for
// good, so `shards: auto` was off on that instance while the others
// sharded the same hot key: two budgets for one key.
func TestMastersAfterFailedSlotRead(t *testing.T) {
	serialHooks(t) // it sets slotsFault
	c := redistest.StartCluster(t)
	var fail atomic.Bool
	fail.Store(true)
	slotsFault = func(context.Context) error {
		if fail.Load() {
			return errors.New("injected: cluster slots unreadable")
		}
		return nil
	}
	defer func() { slotsFault = nil }()
	s, err := New(context.Background(), Options{Addrs: c.Addrs, Cluster: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Masters(); got != 1 {
		t.Fatalf("Masters() with the slot map unreadable = %d, want 1", got)
	}
	fail.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for s.Masters() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("Masters() = %d 10s after the slot map became readable, want 3", s.Masters())
		}
		time.Sleep(10 * time.Millisecond) // a poll, not a synchronisation
	}
	// Shard keys made before the map was known are placed again with it:
	// on three different nodes.
	keys := s.ShardKeys("hot", 3)
	nodes := map[uint16]bool{}
	m := s.slotNodes.Load()
	for _, k := range keys {
		nodes[m.of[slot(s.Key(k))]] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("ShardKeys(hot, 3) = %q on %d nodes, want 3", keys, len(nodes))
	}
}

// TestCloseEndsSlotReads: Close ends the reads of the slot map begun in
// the background and returns after them. A read retried by Masters while
// the map was unknown ran on past Close (on a closed client), and under
// -race a test restoring the slotsFault hook after Close raced with it
// whenever a read took longer than slotRetry, as on a loaded machine.
func TestCloseEndsSlotReads(t *testing.T) {
	serialHooks(t) // it sets slotsFault
	c := redistest.StartCluster(t)
	var fail atomic.Bool
	var running atomic.Int32
	fail.Store(true)
	slotsFault = func(ctx context.Context) error {
		if fail.Load() {
			return errors.New("injected: cluster slots unreadable")
		}
		running.Add(1)
		defer running.Add(-1)
		<-ctx.Done() // Redis does not answer until the read is given up
		return ctx.Err()
	}
	defer func() { slotsFault = nil }()
	s, err := New(context.Background(), Options{Addrs: c.Addrs, Cluster: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(false)
	deadline := time.Now().Add(10 * time.Second) // a bound: Masters reads again after slotRetry (1s)
	for running.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no read of the slot map 10s after Masters found it unknown")
		}
		s.Masters()
		time.Sleep(10 * time.Millisecond) // a poll, not a synchronisation
	}
	s.Close()
	if n := running.Load(); n != 0 {
		t.Fatalf("%d reads of the slot map still running after Close returned, want 0", n)
	}
}
