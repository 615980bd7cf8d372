package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// numberedShared is memShared that adds a writer's op on a key only if it
// is numbered above the last one it added, as fleet.lua does (see
// redisstore.SyncOp), and whose ops with hits fail without being added
// while noWrites is set (reads still answer).
type numberedShared struct {
	*memShared
	noWrites atomic.Bool
	mu       sync.Mutex
	last     map[string]uint64 // key and writer: the last op added
}

func (m *numberedShared) Sync(ctx context.Context, ops []redisstore.SyncOp) error {
	var errs []error
	for i := range ops {
		op := &ops[i]
		if len(op.Hits) > 0 && m.noWrites.Load() {
			op.Err = fmt.Errorf("writes fail: %w", sluice.ErrStoreUnavailable)
			errs = append(errs, op.Err)
			continue
		}
		one := []redisstore.SyncOp{*op}
		if op.Writer != "" && len(op.Hits) > 0 {
			m.mu.Lock()
			if k := op.Key + "|" + op.Writer; m.last[k] >= op.Seq {
				one[0].Hits = nil // added before: read only
			} else {
				m.last[k] = op.Seq
			}
			m.mu.Unlock()
		}
		if err := m.memShared.Sync(ctx, one); err != nil {
			return err
		}
		op.State, op.Now, op.Err = one[0].State, one[0].Now, nil
	}
	return errors.Join(errs...)
}

// TestSyncEvictedSuccessorOrder: a key's entry whose rule changed still
// has an op in doubt (Redis takes no writes); the entry that took over is
// evicted, idle, before that op is sent. The key's next entry must still
// wait for it before numbering hits of its own: here its op, sent by its
// own read when writes are back, would reach Redis first and make it skip
// the old one. Every request admitted must be counted in the end.
func TestSyncEvictedSuccessorOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 100 * time.Millisecond
		m := &numberedShared{memShared: newMemShared(), last: map[string]uint64{}}
		s, err := NewSync(m, SyncOptions{Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		admitted := int64(0)
		take := func(limit sluice.Limit, n int) {
			t.Helper()
			for i := range n {
				r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: limit, Cost: 1, Now: time.Now()}
				if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
					t.Fatalf("Take %d (%v) = %+v, %v; want allowed", i, limit, d, err)
				}
				admitted++
			}
		}
		a, b := sluice.PerHour(100), sluice.PerHour(99)
		take(a, 3) // cold, the first entry's read, a local hit
		m.noWrites.Store(true)
		time.Sleep(iv + iv/2) // the batch at iv fails: the hit's op is in doubt
		synctest.Wait()
		take(b, 1)               // the rule changed: a second entry, decided in the store
		time.Sleep(2 * iv)       // the batch at 3iv evicts the second entry, idle
		synctest.Wait()          // (the first one's op fails again at 2iv and 3iv)
		take(b, 3)               // a third entry, with a local hit
		time.Sleep(2*iv + iv/10) // its view is two intervals old if its batches failed
		synctest.Wait()
		m.noWrites.Store(false)
		take(b, 1) // reads first if its view is that old
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, hits := m.snapshot(); hits["k"] != admitted {
			t.Errorf("hits counted = %d, want the %d admitted", hits["k"], admitted)
		}
	})
}

// TestSyncRuleFlipsKeepNoChain: a key whose rule changes on every request
// makes a new entry each time; those before it, with nothing left to
// send, must not stay linked to it (see syncEntry.prev).
func TestSyncRuleFlipsKeepNoChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := NewSync(newMemShared(), SyncOptions{Interval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		for i := range 100 {
			r := sluice.Request{Key: "k", Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(int64(100 + i%2)), Cost: 1, Now: time.Now()}
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				t.Fatalf("Take %d = %+v, %v; want allowed", i, d, err)
			}
		}
		s.mu.Lock()
		e := s.keys[nsKey{key: "k"}]
		s.mu.Unlock()
		n := 0
		for p := e.prev.Load(); p != nil; p = p.prev.Load() {
			n++
		}
		if n != 0 {
			t.Errorf("the key's entry links %d entries before it, want none (all quiet)", n)
		}
	})
}
