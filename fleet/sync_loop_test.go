package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// memShared is an in-process stand-in for the shared store's Sync, to test
// the batch loop's timing in a synctest bubble (a Redis connection cannot
// live in one). It applies hits with the same steps as fleet.lua, whose
// equivalence TestSyncScriptTwin checks against a real Redis.
type memShared struct {
	sluice.Store // only Take is used, below
	mu           sync.Mutex
	st           map[string]sluice.State
	calls        []int // keys per Sync call (1 for a SyncTake)
	takes        int   // Take calls: cold keys
	hits         map[string]int64
	down         bool
}

func (m *memShared) setDown(down bool) {
	m.mu.Lock()
	m.down = down
	m.mu.Unlock()
}

func newMemShared() *memShared {
	return &memShared{st: map[string]sluice.State{}, hits: map[string]int64{}}
}

func (m *memShared) Sync(_ context.Context, ops []redisstore.SyncOp) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, len(ops))
	if m.down {
		for i := range ops {
			ops[i].Err = fmt.Errorf("down: %w", sluice.ErrStoreUnavailable)
		}
		return ops[0].Err
	}
	for i := range ops {
		op := &ops[i]
		t, _ := op.Limit.Ticks()
		st := m.st[op.Key]
		for _, h := range op.Hits {
			addHit(op.Algorithm, &t, &st, h)
			if op.Algorithm == sluice.TokenBucket || op.Algorithm == sluice.GCRA {
				m.hits[op.Key] += h.Cost / t.Period // debt; these tests send under maxHits, unfolded
			} else {
				m.hits[op.Key] += h.Cost
			}
		}
		m.st[op.Key] = st
		op.State, op.Now, op.Err = st, time.Now().UnixMicro(), nil
	}
	return nil
}

// Take is the exact decision a Sync asks of its store for a cold key.
func (m *memShared) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	m.mu.Lock()
	m.takes++
	m.mu.Unlock()
	d, _, err := m.take(r)
	return d, err
}

func (m *memShared) SyncTake(_ context.Context, r sluice.Request) (sluice.Decision, redisstore.Taken, error) {
	m.mu.Lock()
	m.calls = append(m.calls, 1)
	m.mu.Unlock()
	d, st, err := m.take(r)
	return d, redisstore.Taken{State: st}, err
}

func (m *memShared) take(r sluice.Request) (sluice.Decision, sluice.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return sluice.Decision{}, sluice.State{}, fmt.Errorf("down: %w", sluice.ErrStoreUnavailable)
	}
	st := m.st[r.Key]
	var d sluice.Decision
	if _, err := r.Algorithm.TakeMicro(&d, &st, &r.Limit, r.Now.UnixMicro(), r.Cost); err != nil {
		return d, st, err
	}
	if d.Allowed {
		m.hits[r.Key] += r.Cost
	}
	m.st[r.Key] = st
	return d, st, nil
}

func (m *memShared) snapshot() ([]int, map[string]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	hits := map[string]int64{}
	for k, v := range m.hits {
		hits[k] = v
	}
	return append([]int(nil), m.calls...), hits
}

// TestSyncLoop checks the batch loop on a fake clock: a key asked for once
// is decided in the store (cold), a key asked for again is read once, every
// key with hits during an interval goes out in one batch at its end, an
// idle interval sends nothing, keys idle for two intervals are forgotten
// (and cold again), and Close sends what is left.
func TestSyncLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 100 * time.Millisecond
		m := newMemShared()
		s, err := NewSync(m, SyncOptions{Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		take := func(key string) sluice.Decision {
			t.Helper()
			d, err := s.Take(ctx, sluice.Request{Key: key, Algorithm: sluice.FixedWindow, Limit: sluice.PerHour(100), Cost: 1, Now: time.Now()})
			if err != nil {
				t.Fatalf("Take(%s): %v", key, err)
			}
			return d
		}
		for _, k := range []string{"a", "b", "c", "a", "a", "c"} {
			take(k)
		}
		// a, b and c are cold (asked for once): one exact Take each. a and
		// c, asked for again, become entries with one exact SyncTake each;
		// a's third request is local.
		calls, _ := m.snapshot()
		if len(calls) != 2 || m.takes != 3 {
			t.Fatalf("after first decisions: Sync calls %v and %d Takes, want 2 loads of one key (a, c) and 3 Takes (a, b, c)", calls, m.takes)
		}
		time.Sleep(iv)
		synctest.Wait()
		calls, hits := m.snapshot()
		if len(calls) != 3 || calls[2] != 2 {
			t.Fatalf("after one interval: Sync calls %v, want one batch of 2 keys (a, c: b is no entry)", calls)
		}
		if hits["a"] != 3 || hits["b"] != 1 || hits["c"] != 2 {
			t.Errorf("hits counted = %v, want a:3 b:1 c:2", hits)
		}
		take("a")
		time.Sleep(iv)
		synctest.Wait()
		if calls, _ = m.snapshot(); len(calls) != 4 || calls[3] != 1 {
			t.Fatalf("after a second interval: Sync calls %v, want a batch of 1 key (a)", calls)
		}
		if st := s.Stats(); st.Keys != 1 {
			t.Errorf("after c idle for an interval: Stats.Keys = %d, want 1 (c forgotten)", st.Keys)
		}
		time.Sleep(3 * iv) // idle: nothing to send
		synctest.Wait()
		if calls, _ = m.snapshot(); len(calls) != 4 {
			t.Fatalf("idle intervals: Sync calls %v, want none more", calls)
		}
		if st := s.Stats(); st.Keys != 0 || st.Loads != 2 || st.Batches != 2 || st.BatchKeys != 3 || st.Cold != 3 {
			t.Errorf("Stats = %+v, want Keys 0, Loads 2, Batches 2, BatchKeys 3, Cold 3", st)
		}
		if d := take("b"); d.Remaining != 98 { // cold again: b's count is 2 now
			t.Errorf("Take(b) after idle: Remaining = %d, want 98", d.Remaining)
		}
		take("b") // warm: read (decided in the store)
		take("b") // local
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, hits = m.snapshot(); hits["b"] != 4 {
			t.Errorf("after Close: b's hits counted = %d, want 4", hits["b"])
		}
		if st := s.Stats(); st.Loads != 3 || st.Cold != 4 {
			t.Errorf("Stats = %+v, want Loads 3, Cold 4", st)
		}
	})
}

// TestSyncStaleView checks that a view is never used when it is two
// intervals old: while the shared store fails, decisions go on locally for
// two intervals, then fail (so store.on_error applies), and the hits made
// meanwhile are sent once it answers again.
func TestSyncStaleView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 100 * time.Millisecond
		m := newMemShared()
		s, err := NewSync(m, SyncOptions{Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r := sluice.Request{Key: "k", Algorithm: sluice.TokenBucket, Limit: sluice.PerSecond(1000), Cost: 1}
		take := func() error {
			r.Now = time.Now()
			_, err := s.Take(context.Background(), r)
			return err
		}
		for range 2 { // the first is cold, decided in the store; the second reads the key
			if err := take(); err != nil {
				t.Fatal(err)
			}
		}
		m.setDown(true)
		for i := range 19 { // up to two intervals after the last good batch
			time.Sleep(iv / 10)
			if err := take(); err != nil {
				t.Fatalf("decision %d, %v after the store went down: %v", i, time.Duration(i+1)*iv/10, err)
			}
		}
		time.Sleep(2 * iv)
		if err := take(); !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("decision on a view 3 intervals old: err = %v, want ErrStoreUnavailable", err)
		}
		m.setDown(false)
		time.Sleep(iv)
		synctest.Wait()
		if _, hits := m.snapshot(); hits["k"] != 21 {
			t.Errorf("hits counted once the store is back: %d, want 21", hits["k"])
		}
		if st := s.Stats(); st.BatchErrors == 0 {
			t.Errorf("Stats = %+v: want batch errors", st)
		}
	})
}
