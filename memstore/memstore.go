// Package memstore is Sluice's embedded store: per-key algorithm state in
// process memory, sharded by key hash with one lock per shard, and bounded.
//
// Bounded how:
//
//   - A key whose state has returned to rest (a full bucket, an ended
//     window, an empty log) is as good as absent: Take treats it as new, and
//     it is deleted by the incremental sweep that runs as new keys arrive,
//     or by Sweep; both shrink the sets a flood of keys grew. Rest
//     is derived from the algorithm and the limit; it is exact, so
//     forgetting a key never changes the decision of requests that come
//     in time order. A clock that steps back (a VM's) admits nothing past
//     the limit: a key still held decides on its state, each algorithm
//     counting the earlier request as if at the key's latest time (the
//     windows) or finding no more refilled than then (the buckets), and
//     the key recovers when the clock reaches its time again; a key
//     already forgotten had rested by the clock before the step, and is
//     found new. There the Redis store, which keeps a key
//     redisstore.Options.ExpiryMargin past its rest, decides on the key's
//     state and may refuse what memory admits (TestClockStepBack,
//     TestClockStepBackAfterRest).
//   - Options.MaxKeys caps the keys held, exactly (each shard holds its
//     share of the cap, and there are never more shards than MaxKeys/8).
//     When a shard is full and sweeping
//     frees nothing, the store evicts, among a sample of up to 8 keys of that
//     shard, the one that would reach rest first (the cheapest to forget:
//     forgetting it hands that key a fresh allowance early). Evictions counts
//     them.
//   - The sliding window log holds at most Rate times per key (Rate+1
//     after a forced charge past the limit, Limiter.Report).
//
// The store keeps one state per Request.Namespace+Key: a sluice.Limiter
// names its algorithm and limit in the namespace, so limiters sharing a
// Store never read each other's counts.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"
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

// evictSample is how many keys of a full shard eviction compares, and so
// the fewest keys a shard is made to hold: with fewer, the one key of a
// shard is evicted whatever its state (a client refused for the hour
// freed by any new key in its shard).
const evictSample = 8

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// MaxKeys caps the number of keys held, exactly: the cap is split
	// over the shards (which hold MaxKeys/Shards keys each, give or take
	// one); 0 means DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two, and down to at most MaxKeys/8 so that every shard
	// holds at least the 8 keys eviction compares; 0 means DefaultShards.
	Shards int
}

// Store is the in-memory sluice.Store. It is safe for concurrent use; the
// zero value is not usable, call New.
type Store struct {
	seed      maphash.Seed
	secret    [3]uint64 // the short-key hash's key, random
	nsCache   [16]atomic.Pointer[nsSeen]
	nsIDs     sync.Map   // namespace → *interned
	nsMu      sync.Mutex // over numbering a namespace
	nsCount   int        // namespaces numbered
	shards    []shard
	mask      uint64
	evictions atomic.Uint64
}

var (
	_ sluice.Store    = (*Store)(nil)
	_ sluice.Resetter = (*Store)(nil)
	_ sluice.KeyTaker = (*Store)(nil)
)

type shard struct {
	mu       sync.Mutex
	small    table
	logs     map[string]*logEntry
	adds     uint32
	cap      uint32 // keys this shard may hold
	logsPeak uint32 // the most keys logs has held since it was made (Go maps never shrink)
	// Keep shards on separate cache lines: the fields above take 68
	// bytes, the hot ones the first 64.
	_ [128 - 68]byte
}

// New returns an empty Store.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = DefaultShards
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	pow := 1
	for pow < n && pow*2 <= maxKeys/evictSample {
		pow <<= 1
	}
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, pow), mask: uint64(pow - 1)}
	for i := range s.secret {
		// Random odd words, from maphash's random seeds.
		s.secret[i] = maphash.Comparable(maphash.MakeSeed(), i) | 1
	}
	// The caps add up to maxKeys exactly, each at least 1.
	base, extra := maxKeys/pow, maxKeys%pow
	for i := range s.shards {
		s.shards[i].logs = make(map[string]*logEntry)
		s.shards[i].cap = uint32(min(base, math.MaxUint32))
		if i < extra {
			s.shards[i].cap++
		}
	}
	return s
}

// Take decides r under its shard's lock. It never blocks on I/O and ignores
// ctx.
func (s *Store) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	ok, rem, retry, reset, delay, err := s.TakeKey(ctx, &r, r.Key, r.Cost, r.Now)
	if err != nil {
		return sluice.Decision{}, err
	}
	return sluice.Decision{Allowed: ok, Limit: r.Limit.Rate, Remaining: rem, RetryAfter: retry, ResetAfter: reset, Delay: delay}, err
}

// TakeKey is Take for *r with key, cost and now in its Key, Cost and Now
// (sluice.KeyTaker): a Limiter's hot path, which passes its Request by
// pointer instead of copying it, and gets the decision back in registers.
func (s *Store) TakeKey(_ context.Context, r *sluice.Request, key string, cost int64, at time.Time) (allowed bool, remaining int64, retryAfter, resetAfter, delay time.Duration, err error) {
	now := at.UnixMicro()
	h, ns := s.hash(r.Namespace, key)
	sh := &s.shards[h&s.mask]
	var d sluice.Decision
	if r.Algorithm.UsesLog(r.Limit) {
		var buf [maxStackKey]byte
		lk := logKey(ns, key, &buf)
		sh.mu.Lock()
		err = s.takeLog(sh, lk, r, cost, now, &d)
		sh.mu.Unlock()
	} else {
		// The small-state path inline (a call here costs as much as the
		// lookup); TakeMicro writes the decision straight into d.
		sh.mu.Lock()
		e := sh.small.get(h, ns, key)
		var st sluice.State
		if e != nil && now < e.idle {
			st = sluice.State{T: e.t, N: e.n, M: e.m}
		}
		var idle int64
		if idle, err = step(r, cost, &d, &st, now); err == nil {
			if e != nil {
				*e = entry{t: st.T, n: st.N, m: st.M, idle: idle}
			} else {
				s.putSmall(sh, h, ns, key, e, &st, idle, now)
			}
		}
		sh.mu.Unlock()
	}
	if err != nil {
		return false, 0, 0, 0, 0, fmt.Errorf("memstore: take %q: %w", key, err)
	}
	return d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, nil
}

// putSmall is putLog for the keys kept in the shard's table.
func (s *Store) putSmall(sh *shard, h uint64, ns, key string, e *entry, st *sluice.State, idle, now int64) {
	if e == nil {
		if idle <= now {
			return
		}
		s.insert(sh, now)
		e = newEntry(ns, key)
		sh.small.add(h, len(ns)+len(key), e)
	}
	*e = entry{t: st.T, n: st.N, m: st.M, idle: idle}
}

// insert makes room for one new key in sh: every 16th insert it sweeps a
// few resting keys, and at the cap it sweeps, then evicts.
func (s *Store) insert(sh *shard, now int64) {
	sh.adds++
	if sh.adds%16 == 0 {
		sh.sweep(now, 8)
	}
	if sh.small.len()+len(sh.logs) < int(sh.cap) {
		return
	}
	if sh.sweep(now, 32) > 0 {
		return
	}
	sh.evictOne()
	s.evictions.Add(1)
}

// sweep deletes resting keys among up to budget keys of each of the
// shard's two sets: the table from where the last sweep stopped, the logs
// from a random place. It returns how many it deleted.
func (sh *shard) sweep(now int64, budget int) int {
	deleted := 0
	if t := &sh.small; t.count > 0 {
		mask := uint32(len(t.slots) - 1)
		i := t.cursor & mask
		// One pass over the cells; a deletion may shift a later key into
		// cell i, so i is looked at again before moving on.
		for seen, steps := 0, 0; seen < budget && steps < len(t.slots); {
			if e := t.slots[i].e; e != nil {
				seen++
				if e.idle <= now {
					t.deleteAt(i)
					deleted++
					continue
				}
			}
			i = (i + 1) & mask
			steps++
		}
		t.cursor = i
	}
	seen := 0
	for k, e := range sh.logs {
		if seen++; seen > budget {
			break
		}
		if e.idle <= now {
			delete(sh.logs, k)
			deleted++
		}
	}
	sh.compact()
	return deleted
}

// compact hands back the room of deleted keys once their sets are at
// least 8 times larger than the keys they hold: the table's cells and the
// log map's buckets only grow as keys arrive, so after a flood of keys
// that came to rest they would keep half the flood's memory, and every
// sweep would walk their empty cells to find its few keys (16 µs per new
// key at the cap, where 0.6 µs is the rule). Every sweep calls it; it
// costs two comparisons when there is nothing to do.
func (sh *shard) compact() {
	sh.small.shrink()
	if n := len(sh.logs); sh.logsPeak >= 64 && n <= int(sh.logsPeak)/8 {
		m := make(map[string]*logEntry, n)
		maps.Copy(m, sh.logs)
		sh.logs, sh.logsPeak = m, uint32(n)
	}
}

// evictOne deletes, among a sample of up to 8 keys, the one that reaches
// rest first.
func (sh *shard) evictOne() {
	var victim string
	best, seen, inLogs := int64(0), 0, false
	victimCell := -1
	if t := &sh.small; t.count > 0 {
		mask := uint32(len(t.slots) - 1)
		i := t.cursor & mask
		for steps := 0; seen < evictSample && steps < len(t.slots); steps++ {
			if e := t.slots[i].e; e != nil {
				if seen == 0 || e.idle < best {
					victimCell, best = int(i), e.idle
				}
				seen++
			}
			i = (i + 1) & mask
		}
		t.cursor = i
	}
	n := 0
	for k, e := range sh.logs {
		if seen == 0 || e.idle < best {
			victim, best, inLogs = k, e.idle, true
		}
		seen++
		if n++; n >= evictSample {
			break
		}
	}
	switch {
	case inLogs:
		delete(sh.logs, victim)
	case victimCell >= 0:
		sh.small.deleteAt(uint32(victimCell))
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
	// Up to takeAllStack requests (an Envoy request's descriptors, most
	// often) the working slices live on the stack: made to len(rs), those
	// of more than a few allocated on every call.
	var (
		idxA    [takeAllStack]int
		hsA     [takeAllStack]uint64
		nssA    [takeAllStack]string
		orderA  [takeAllStack]int
		statesA [takeAllStack]sluice.State
		idlesA  [takeAllStack]int64
	)
	idx := upTo(idxA[:], len(rs))
	hs := upTo(hsA[:], len(rs))
	nss := upTo(nssA[:], len(rs)) // the namespaces' stored forms
	for i := range rs {
		hs[i], nss[i] = s.hash(rs[i].Namespace, rs[i].Key)
		idx[i] = int(hs[i] & s.mask)
	}
	order := append(orderA[:0], idx...)
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
	states := upTo(statesA[:], len(rs))
	idles := upTo(idlesA[:], len(rs))
	for i := range rs {
		r := &rs[i]
		now := r.Now.UnixMicro()
		st, found := sluice.State{}, false
		for j := i - 1; j >= 0; j-- { // an earlier request for the same key
			if rs[j].Key == r.Key && rs[j].Namespace == r.Namespace && rs[j].Algorithm.UsesLog(rs[j].Limit) == r.Algorithm.UsesLog(r.Limit) {
				st, found = states[j].Clone(), true
				break
			}
		}
		if !found {
			st = s.shards[idx[i]].load(hs[i], nss[i], r, now)
		}
		idle, err := step(r, r.Cost, &ds[i], &st, now)
		if err != nil {
			return fmt.Errorf("memstore: takeall %q: %w", r.Key, err)
		}
		states[i], idles[i] = st, idle
	}
	for i := range ds {
		if !ds[i].Allowed && !rs[i].Force { // a forced charge never fails the others
			return nil
		}
	}
	for i := range rs {
		s.store(&s.shards[idx[i]], hs[i], nss[i], &rs[i], states[i], idles[i])
	}
	return nil
}

// takeAllStack is the number of requests up to which TakeAll keeps its
// working slices on the stack.
const takeAllStack = 8

// upTo returns the first n elements of a (zero) when it has them, else a
// new slice of n.
func upTo[T any](a []T, n int) []T {
	if n <= len(a) {
		return a[:n]
	}
	return make([]T, n)
}

// step runs r's algorithm on st for cost: Take's step, or Charge's for a
// forced request.
func step(r *sluice.Request, cost int64, d *sluice.Decision, st *sluice.State, now int64) (int64, error) {
	if r.Force {
		return r.Algorithm.ChargeMicro(d, st, &r.Limit, now, cost)
	}
	return r.Algorithm.TakeMicro(d, st, &r.Limit, now, cost)
}

// load returns a copy of r's state, the zero State if absent or at rest;
// ns is r's namespace as stored (see Store.hash).
func (sh *shard) load(h uint64, ns string, r *sluice.Request, now int64) sluice.State {
	if r.Algorithm.UsesLog(r.Limit) {
		var buf [maxStackKey]byte
		if le := sh.logs[logKey(ns, r.Key, &buf)]; le != nil && now < le.idle {
			return le.st.Clone()
		}
		return sluice.State{}
	}
	if e := sh.small.get(h, ns, r.Key); e != nil && now < e.idle {
		return sluice.State{T: e.t, N: e.n, M: e.m}
	}
	return sluice.State{}
}

// store writes r's state, inserting the key if needed; ns is r's
// namespace as stored.
func (s *Store) store(sh *shard, h uint64, ns string, r *sluice.Request, st sluice.State, idle int64) {
	now := r.Now.UnixMicro()
	if r.Algorithm.UsesLog(r.Limit) {
		var buf [maxStackKey]byte
		key := logKey(ns, r.Key, &buf)
		s.putLog(sh, key, sh.logs[key], st, idle, now)
		return
	}
	s.putSmall(sh, h, ns, r.Key, sh.small.get(h, ns, r.Key), &st, idle, now)
}

// Reset forgets r.Namespace+r.Key (sluice.Resetter): its next request
// finds it new.
func (s *Store) Reset(_ context.Context, r sluice.Request) error {
	h, ns := s.hash(r.Namespace, r.Key)
	sh := &s.shards[h&s.mask]
	var buf [maxStackKey]byte
	sh.mu.Lock()
	delete(sh.logs, logKey(ns, r.Key, &buf))
	if i := sh.small.find(h, ns, r.Key); i >= 0 {
		sh.small.deleteAt(uint32(i))
	}
	sh.mu.Unlock()
	return nil
}

// Sweep deletes every key at rest at now and returns how many it deleted,
// and hands back the room a flood of keys left behind (see compact). The
// store sweeps a little on its own as keys arrive; a daemon may also call
// Sweep on a timer to hand memory back sooner.
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
		n += sh.small.len() + len(sh.logs)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many keys were evicted, not at rest, to respect
// MaxKeys since the store was made.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }
