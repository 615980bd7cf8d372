// Package memstore is Sluice's embedded store: per-key algorithm state in
// process memory, sharded by key hash with one lock per shard, and bounded.
//
// Bounded how:
//
//   - A key whose state has returned to rest (a full bucket, an ended
//     window, an empty log) is as good as absent: Take treats it as new, and
//     it is deleted by the incremental sweep that runs as new keys arrive,
//     or by Sweep. Rest is derived from the algorithm and the limit; it is
//     exact, so forgetting a key never changes a decision.
//   - Options.MaxKeys caps the keys held. When a shard is full and sweeping
//     frees nothing, the store evicts, among a sample of up to 8 keys of that
//     shard, the one that would reach rest first (the cheapest to forget:
//     forgetting it hands that key a fresh allowance early). Evictions counts
//     them.
//   - The sliding window log holds at most Rate times per key.
//
// Keys are shared by every Limiter that uses the same Store: give limiters
// with different limits or algorithms distinct key prefixes.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Defaults for the zero Options.
const (
	DefaultMaxKeys = 4 << 20
	DefaultShards  = 256
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// MaxKeys caps the number of keys held; 0 means DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two; 0 means DefaultShards.
	Shards int
}

// Store is the in-memory sluice.Store. It is safe for concurrent use; the
// zero value is not usable, call New.
type Store struct {
	seed      maphash.Seed
	shards    []shard
	mask      uint64
	perShard  int // key cap per shard
	evictions atomic.Uint64
}

var _ sluice.Store = (*Store)(nil)

// entry is the state of a key whose algorithm keeps no log: 32 bytes.
type entry struct {
	t, n, m int64
	idle    int64 // µs since the epoch from which the state is at rest
}

// logEntry is the state of a sliding window log or a multi-segment counter.
type logEntry struct {
	st   sluice.State
	idle int64
}

type shard struct {
	mu    sync.Mutex
	small map[string]*entry
	logs  map[string]*logEntry
	adds  uint32
	_     [64 - 8 - 8 - 8 - 4]byte // keep shards on separate cache lines
}

// New returns an empty Store.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = DefaultShards
	}
	pow := 1
	for pow < n {
		pow <<= 1
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, pow), mask: uint64(pow - 1)}
	s.perShard = max(1, (maxKeys+pow-1)/pow)
	for i := range s.shards {
		s.shards[i].small = make(map[string]*entry)
		s.shards[i].logs = make(map[string]*logEntry)
	}
	return s
}

func (s *Store) shardOf(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// Take decides r under its shard's lock. It never blocks on I/O and ignores
// ctx.
func (s *Store) Take(_ context.Context, r sluice.Request) (sluice.Decision, error) {
	now := r.Now.UnixMicro()
	sh := s.shardOf(r.Key)
	sh.mu.Lock()
	d, err := s.take(sh, &r, now)
	sh.mu.Unlock()
	if err != nil {
		return d, fmt.Errorf("memstore: take %q: %w", r.Key, err)
	}
	return d, nil
}

func (s *Store) take(sh *shard, r *sluice.Request, now int64) (sluice.Decision, error) {
	if r.Algorithm.UsesLog(r.Limit) {
		le := sh.logs[r.Key]
		var st sluice.State
		if le != nil && now < le.idle {
			st = le.st
		}
		d, idle, err := r.Algorithm.TakeMicro(&st, r.Limit, now, r.Cost)
		if err != nil {
			return d, err
		}
		if le == nil {
			if idle <= now {
				return d, nil
			}
			le = &logEntry{}
			s.insert(sh, now)
			sh.logs[strings.Clone(r.Key)] = le
		}
		le.st, le.idle = st, idle
		return d, nil
	}
	e := sh.small[r.Key]
	var st sluice.State
	if e != nil && now < e.idle {
		st = sluice.State{T: e.t, N: e.n, M: e.m}
	}
	d, idle, err := r.Algorithm.TakeMicro(&st, r.Limit, now, r.Cost)
	if err != nil {
		return d, err
	}
	if e == nil {
		if idle <= now {
			return d, nil // at rest: nothing worth keeping
		}
		e = &entry{}
		s.insert(sh, now)
		sh.small[strings.Clone(r.Key)] = e
	}
	*e = entry{t: st.T, n: st.N, m: st.M, idle: idle}
	return d, nil
}

// insert makes room for one new key in sh: every 16th insert it sweeps a
// few resting keys, and at the cap it sweeps, then evicts.
func (s *Store) insert(sh *shard, now int64) {
	sh.adds++
	if sh.adds%16 == 0 {
		sh.sweep(now, 8)
	}
	if len(sh.small)+len(sh.logs) < s.perShard {
		return
	}
	if sh.sweep(now, 32) > 0 {
		return
	}
	sh.evictOne()
	s.evictions.Add(1)
}

// sweep deletes resting keys among up to budget keys of each map, starting
// at a random place. It returns how many it deleted.
func (sh *shard) sweep(now int64, budget int) int {
	deleted, seen := 0, 0
	for k, e := range sh.small {
		if seen++; seen > budget {
			break
		}
		if e.idle <= now {
			delete(sh.small, k)
			deleted++
		}
	}
	seen = 0
	for k, e := range sh.logs {
		if seen++; seen > budget {
			break
		}
		if e.idle <= now {
			delete(sh.logs, k)
			deleted++
		}
	}
	return deleted
}

// evictOne deletes, among a sample of up to 8 keys, the one that reaches
// rest first.
func (sh *shard) evictOne() {
	var victim string
	best, seen, inLogs := int64(0), 0, false
	for k, e := range sh.small {
		if seen == 0 || e.idle < best {
			victim, best = k, e.idle
		}
		if seen++; seen >= 8 {
			break
		}
	}
	n := 0
	for k, e := range sh.logs {
		if seen == 0 || e.idle < best {
			victim, best, inLogs = k, e.idle, true
		}
		seen++
		if n++; n >= 8 {
			break
		}
	}
	if inLogs {
		delete(sh.logs, victim)
	} else {
		delete(sh.small, victim)
	}
}

// TakeAll decides rs as one: each is counted only if all are allowed. The
// shards involved are locked together, in index order, so the check and the
// commit are atomic. A key may appear more than once; later requests see
// the earlier ones' tentative counts.
func (s *Store) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(rs) != len(ds) {
		return errors.New("memstore: takeall: len(ds) != len(rs)")
	}
	switch len(rs) {
	case 0:
		return nil
	case 1:
		d, err := s.Take(ctx, rs[0])
		ds[0] = d
		return err
	}
	idx := make([]int, len(rs))
	for i := range rs {
		idx[i] = int(maphash.String(s.seed, rs[i].Key) & s.mask)
	}
	order := slices.Clone(idx)
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
	}()
	states := make([]sluice.State, len(rs))
	idles := make([]int64, len(rs))
	for i := range rs {
		r := &rs[i]
		now := r.Now.UnixMicro()
		st, found := sluice.State{}, false
		for j := i - 1; j >= 0; j-- { // an earlier request for the same key
			if rs[j].Key == r.Key && rs[j].Algorithm.UsesLog(rs[j].Limit) == r.Algorithm.UsesLog(r.Limit) {
				st, found = states[j].Clone(), true
				break
			}
		}
		if !found {
			st = s.shards[idx[i]].load(r, now)
		}
		d, idle, err := r.Algorithm.TakeMicro(&st, r.Limit, now, r.Cost)
		if err != nil {
			return fmt.Errorf("memstore: takeall %q: %w", r.Key, err)
		}
		ds[i], states[i], idles[i] = d, st, idle
	}
	if !sluice.AllAllowed(ds) {
		return nil
	}
	for i := range rs {
		s.store(&s.shards[idx[i]], &rs[i], states[i], idles[i])
	}
	return nil
}

// load returns a copy of r.Key's state, the zero State if absent or at rest.
func (sh *shard) load(r *sluice.Request, now int64) sluice.State {
	if r.Algorithm.UsesLog(r.Limit) {
		if le := sh.logs[r.Key]; le != nil && now < le.idle {
			return le.st.Clone()
		}
		return sluice.State{}
	}
	if e := sh.small[r.Key]; e != nil && now < e.idle {
		return sluice.State{T: e.t, N: e.n, M: e.m}
	}
	return sluice.State{}
}

// store writes r.Key's state, inserting the key if needed.
func (s *Store) store(sh *shard, r *sluice.Request, st sluice.State, idle int64) {
	now := r.Now.UnixMicro()
	if r.Algorithm.UsesLog(r.Limit) {
		le := sh.logs[r.Key]
		if le == nil {
			if idle <= now {
				return
			}
			le = &logEntry{}
			s.insert(sh, now)
			sh.logs[strings.Clone(r.Key)] = le
		}
		le.st, le.idle = st, idle
		return
	}
	e := sh.small[r.Key]
	if e == nil {
		if idle <= now {
			return
		}
		e = &entry{}
		s.insert(sh, now)
		sh.small[strings.Clone(r.Key)] = e
	}
	*e = entry{t: st.T, n: st.N, m: st.M, idle: idle}
}

// Sweep deletes every key at rest at now and returns how many it deleted.
// The store sweeps a little on its own as keys arrive; a daemon may also
// call Sweep on a timer to hand memory back sooner.
func (s *Store) Sweep(now time.Time) int {
	t := now.UnixMicro()
	deleted := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		deleted += sh.sweep(t, int(^uint(0)>>1))
		sh.mu.Unlock()
	}
	return deleted
}

// Len returns the number of keys held (some may be at rest, not yet swept).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.small) + len(sh.logs)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many keys were evicted, not at rest, to respect
// MaxKeys since the store was made.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }
