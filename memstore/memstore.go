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
//   - Options.MaxKeys caps the keys held, exactly (each shard holds its
//     share of the cap, and there are never more shards than keys allowed).
//     When a shard is full and sweeping
//     frees nothing, the store evicts, among a sample of up to 8 keys of that
//     shard, the one that would reach rest first (the cheapest to forget:
//     forgetting it hands that key a fresh allowance early). Evictions counts
//     them.
//   - The sliding window log holds at most Rate times per key.
//
// The store keeps one state per Request.Namespace+Key: a sluice.Limiter
// names its algorithm and limit in the namespace, so limiters sharing a
// Store never read each other's counts.
package memstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// Defaults for the zero Options.
const (
	DefaultMaxKeys = 4 << 20
	DefaultShards  = 256
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// MaxKeys caps the number of keys held, exactly: the cap is split
	// over the shards (which hold MaxKeys/Shards keys each, give or take
	// one); 0 means DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two, and down to at most MaxKeys so that every shard holds
	// at least one key; 0 means DefaultShards.
	Shards int
}

// Store is the in-memory sluice.Store. It is safe for concurrent use; the
// zero value is not usable, call New.
type Store struct {
	seed      maphash.Seed
	secret    [3]uint64 // the short-key hash's key, random
	nsCache   [16]atomic.Pointer[nsSeen]
	shards    []shard
	mask      uint64
	evictions atomic.Uint64
}

var (
	_ sluice.Store    = (*Store)(nil)
	_ sluice.Resetter = (*Store)(nil)
	_ sluice.KeyTaker = (*Store)(nil)
)

// entry is the state of a key whose algorithm keeps no log: 32 bytes,
// allocated in one block with a copy of its key right behind it (see
// newEntry), so a lookup finds the key and the state in the same place.
type entry struct {
	t, n, m int64
	idle    int64 // µs since the epoch from which the state is at rest
}

const entrySize = int(unsafe.Sizeof(entry{}))

// newEntry allocates a zero entry followed by a copy of ns+key:
// 32+len(ns)+len(key) bytes in one pointer-free block (48 bytes for a
// 16-byte key), where a map would hold a pointer to a 32-byte entry and a
// separately allocated key.
func newEntry(ns, key string) *entry {
	b := make([]byte, entrySize+len(ns)+len(key))
	copy(b[entrySize+copy(b[entrySize:], ns):], key)
	return (*entry)(unsafe.Pointer(unsafe.SliceData(b)))
}

// key returns the key stored behind e; n is its length, kept in the slot.
func (e *entry) key(n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), n)
}

// slot is one cell of a table: 16 bytes.
type slot struct {
	tag  uint32 // the high 32 bits of the key's hash; also its home cell
	klen uint32 // the key's length
	e    *entry // nil: empty
}

// table maps keys to entries with open addressing: linear probing from the
// cell the hash's high bits choose, deletion by shifting the probe run back
// (no tombstones), doubled when three quarters full. It holds 16 bytes per
// cell and needs no rehashing to grow, where a Go map of string to pointer
// holds 24 bytes per cell and hashes every key again.
type table struct {
	slots  []slot // len a power of two, or 0
	count  int
	cursor uint32 // where the incremental sweep and eviction look next
}

func (t *table) len() int { return t.count }

// find returns the index of the cell of ns+key, or -1. The key is kept
// as the concatenation but compared in two parts, so a namespaced lookup
// builds nothing.
func (t *table) find(h uint64, ns, key string) int {
	if t.count == 0 {
		return -1
	}
	tag := uint32(h >> 32)
	mask := uint32(len(t.slots) - 1)
	n := uint32(len(ns) + len(key))
	for i := tag & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.e == nil {
			return -1
		}
		if sl.tag == tag && sl.klen == n {
			if k := sl.e.key(n); k[:len(ns)] == ns && k[len(ns):] == key {
				return int(i)
			}
		}
	}
}

func (t *table) get(h uint64, ns, key string) *entry {
	if i := t.find(h, ns, key); i >= 0 {
		return t.slots[i].e
	}
	return nil
}

// add inserts a key of klen bytes, known to be absent, with e.
func (t *table) add(h uint64, klen int, e *entry) {
	if (t.count+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.place(slot{tag: uint32(h >> 32), klen: uint32(klen), e: e})
	t.count++
}

func (t *table) place(s slot) {
	mask := uint32(len(t.slots) - 1)
	i := s.tag & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, max(8, 2*len(old)))
	for _, s := range old {
		if s.e != nil {
			t.place(s)
		}
	}
}

// deleteAt empties cell i and shifts later cells of its probe run back, so
// that every key stays reachable from its home cell.
func (t *table) deleteAt(i uint32) {
	mask := uint32(len(t.slots) - 1)
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.e == nil {
			break
		}
		// s may move to i unless its home lies cyclically in (i, j].
		if home := s.tag & mask; (j-home)&mask < (j-i)&mask {
			continue
		}
		t.slots[i] = s
		i = j
	}
	t.slots[i] = slot{}
	t.count--
}

type shard struct {
	mu    sync.Mutex
	small table
	logs  map[string]*logEntry
	adds  uint32
	cap   uint32                        // keys this shard may hold
	_     [64 - 8 - 40 - 8 - 4 - 4]byte // keep shards on separate cache lines
}

// logEntry is the state of a sliding window log or a multi-segment counter.
type logEntry struct {
	st   sluice.State
	idle int64
	// arr is the whole array st.Log lies at the end of (a sliding log's
	// times leave from the front and arrive at the back), so that the log
	// can move back to its start instead of growing into a new one.
	arr []int64
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
	for pow < n && pow*2 <= maxKeys {
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

// hash returns the hash of (ns, key): the low bits pick the shard, the
// high 32 bits the cell in the shard's table. The key is hashed with the
// store's random secret or seed; the namespace, which the store's callers
// choose (a Limiter's name, algorithm and limit), is folded in by nsMix, a
// few loads instead of hashing it again on every decision, and cached by
// string identity (nsHash). Namespaces nsMix cannot
// tell apart only share probe runs: lookups compare the whole key.
func (s *Store) hash(ns, key string) uint64 {
	// The key: up to 16 bytes as wyhash does (the way Go's runtime
	// hashes strings on CPUs without AES), two multiplications keyed with
	// the store's random secret; longer keys with maphash and the store's
	// seed. maphash.String costs more in calls than in hashing on a short
	// key, and a hot key's whole decision is a few hundred instructions.
	var h uint64
	if n := len(key); n <= 16 {
		p := unsafe.Pointer(unsafe.StringData(key))
		var a, b uint64
		switch {
		case n >= 8:
			a, b = load64p(p, 0), load64p(p, n-8)
		case n >= 4:
			a, b = uint64(load32p(p, 0)), uint64(load32p(p, n-4))
		case n > 0:
			a = uint64(*(*byte)(p))<<16 | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))
		}
		hi, lo := bits.Mul64(a^s.secret[1], b^s.secret[2])
		hi, lo = bits.Mul64(hi^lo, s.secret[0]^uint64(n))
		h = hi ^ lo
	} else {
		h = maphash.String(s.seed, key)
	}
	if ns == "" {
		return h
	}
	p := unsafe.StringData(ns)
	if e := s.nsCache[(uintptr(unsafe.Pointer(p))>>4)%uintptr(len(s.nsCache))].Load(); e != nil && unsafe.StringData(e.ns) == p && len(e.ns) == len(ns) {
		return h ^ e.mix
	}
	return h ^ s.nsHash(ns)
}

// load64p and load32p read 8 and 4 bytes at p+i, little-endian (one load
// where the CPU allows unaligned ones).
func load64p(p unsafe.Pointer, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(p, i)), 8))
}

func load32p(p unsafe.Pointer, i int) uint32 {
	return binary.LittleEndian.Uint32(unsafe.Slice((*byte)(unsafe.Add(p, i)), 4))
}

// nsSeen is a namespace whose nsMix is known. It holds the string, so the
// memory it points to stays that namespace's for as long as it is cached.
type nsSeen struct {
	ns  string
	mix uint64
}

// nsHash is nsMix(ns), from a small cache when ns is one of the strings the
// store has seen: a Limiter sends the same namespace string with every
// request, so comparing its address and length (the cache holds the
// string, so that address cannot be reused for other bytes) replaces
// hashing it on every decision. A cell is filled once, by the first
// namespace to land in it; others are hashed each time (no allocation on
// the hot path).
func (s *Store) nsHash(ns string) uint64 {
	p := unsafe.StringData(ns)
	c := &s.nsCache[(uintptr(unsafe.Pointer(p))>>4)%uintptr(len(s.nsCache))]
	if e := c.Load(); e != nil {
		if unsafe.StringData(e.ns) == p && len(e.ns) == len(ns) {
			return e.mix
		}
		return nsMix(ns)
	}
	m := nsMix(ns)
	c.CompareAndSwap(nil, &nsSeen{ns: ns, mix: m})
	return m
}

// nsMix hashes ns by its length and its first, middle and last 8 bytes,
// where the name and the limit of a Limiter's namespace sit.
func nsMix(ns string) uint64 {
	n := len(ns)
	var a, b, c uint64
	if n >= 8 {
		a, b, c = load64(ns, 0), load64(ns, n/2-4), load64(ns, n-8)
	} else {
		for i := 0; i < n; i++ {
			a = a<<8 | uint64(ns[i])
		}
	}
	x := a*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(b*0xc2b2ae3d27d4eb4f, 23) ^ bits.RotateLeft64(c*0x165667b19e3779f9, 47) ^ uint64(n)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x | 1 // never 0, so a namespace always moves the hash
}

func load64(s string, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
}

// logKey returns ns+key, the key of a log state. When it fits in buf it
// writes it there and returns a string sharing buf's memory: valid only
// while buf is, and only for lookups (a key kept is copied with
// strings.Clone), so a log decision costs no allocation for its key.
func logKey(ns, key string, buf *[maxStackKey]byte) string {
	if ns == "" {
		return key
	}
	n := len(ns) + len(key)
	if n > maxStackKey {
		return ns + key
	}
	b := append(append(buf[:0], ns...), key...)
	return unsafe.String(unsafe.SliceData(b), n)
}

// maxStackKey bounds the log keys built without allocating.
const maxStackKey = 128

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
	h := s.hash(r.Namespace, key)
	sh := &s.shards[h&s.mask]
	var d sluice.Decision
	if r.Algorithm.UsesLog(r.Limit) {
		var buf [maxStackKey]byte
		lk := logKey(r.Namespace, key, &buf)
		sh.mu.Lock()
		err = s.takeLog(sh, lk, r, cost, now, &d)
		sh.mu.Unlock()
	} else {
		// The small-state path inline (a call here costs as much as the
		// lookup); TakeMicro writes the decision straight into d.
		sh.mu.Lock()
		e := sh.small.get(h, r.Namespace, key)
		var st sluice.State
		if e != nil && now < e.idle {
			st = sluice.State{T: e.t, N: e.n, M: e.m}
		}
		var idle int64
		if idle, err = step(r, cost, &d, &st, now); err == nil {
			if e != nil {
				*e = entry{t: st.T, n: st.N, m: st.M, idle: idle}
			} else {
				s.putSmall(sh, h, r.Namespace, key, e, &st, idle, now)
			}
		}
		sh.mu.Unlock()
	}
	if err != nil {
		return false, 0, 0, 0, 0, fmt.Errorf("memstore: take %q: %w", key, err)
	}
	return d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, nil
}

func (s *Store) takeLog(sh *shard, key string, r *sluice.Request, cost, now int64, d *sluice.Decision) error {
	le := sh.logs[key]
	var st sluice.State
	if le != nil && now < le.idle {
		st = le.st
		if r.Algorithm == sluice.SlidingWindowLog {
			st.Log = le.roomFor(st.Log, min(cost, r.Limit.Rate+1))
		}
	}
	idle, err := step(r, cost, d, &st, now)
	if err == nil {
		s.putLog(sh, key, le, st, idle, now)
	}
	return err
}

// roomFor returns log, the entry's sliding log, where n more times can be
// appended without a new array when its array has that room: a log that
// has reached the end of its array moves back to the array's start, over
// the times that have left it. A log at a steady size then never
// allocates, where append would copy it into a new array (garbage, and a
// GC that turns write barriers on) every few hundred decisions.
func (le *logEntry) roomFor(log []int64, n int64) []int64 {
	if n <= 0 || int64(cap(log)-len(log)) >= n || int64(cap(le.arr)) < int64(len(log))+n || !sameEnd(log, le.arr) {
		return log
	}
	return append(le.arr[:0], log...) // copy: overlapping moves are safe
}

// sameEnd reports whether a and b end at the same place: b's array holds a.
func sameEnd(a, b []int64) bool {
	return cap(a) > 0 && cap(b) > 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(a)))+uintptr(cap(a))*8 == uintptr(unsafe.Pointer(unsafe.SliceData(b)))+uintptr(cap(b))*8
}

// putLog writes a log state for key, whose entry le (nil: absent) the
// caller has already looked up. A new key at rest is not worth keeping.
func (s *Store) putLog(sh *shard, key string, le *logEntry, st sluice.State, idle, now int64) {
	if le == nil {
		if idle <= now {
			return
		}
		le = &logEntry{}
		s.insert(sh, now)
		sh.logs[strings.Clone(key)] = le
	}
	le.st, le.idle = st, idle
	if cap(st.Log) > 0 && !sameEnd(st.Log, le.arr) {
		le.arr = st.Log[:0:cap(st.Log)] // the log moved to a new array
	}
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
	return deleted
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
		for steps := 0; seen < 8 && steps < len(t.slots); steps++ {
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
		if n++; n >= 8 {
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
	idx := make([]int, len(rs))
	hs := make([]uint64, len(rs))
	for i := range rs {
		hs[i] = s.hash(rs[i].Namespace, rs[i].Key)
		idx[i] = int(hs[i] & s.mask)
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
			if rs[j].Key == r.Key && rs[j].Namespace == r.Namespace && rs[j].Algorithm.UsesLog(rs[j].Limit) == r.Algorithm.UsesLog(r.Limit) {
				st, found = states[j].Clone(), true
				break
			}
		}
		if !found {
			st = s.shards[idx[i]].load(hs[i], r, now)
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
		s.store(&s.shards[idx[i]], hs[i], &rs[i], states[i], idles[i])
	}
	return nil
}

// step runs r's algorithm on st for cost: Take's step, or Charge's for a
// forced request.
func step(r *sluice.Request, cost int64, d *sluice.Decision, st *sluice.State, now int64) (int64, error) {
	if r.Force {
		return r.Algorithm.ChargeMicro(d, st, &r.Limit, now, cost)
	}
	return r.Algorithm.TakeMicro(d, st, &r.Limit, now, cost)
}

// load returns a copy of r's state, the zero State if absent or at rest.
func (sh *shard) load(h uint64, r *sluice.Request, now int64) sluice.State {
	if r.Algorithm.UsesLog(r.Limit) {
		if le := sh.logs[r.Namespace+r.Key]; le != nil && now < le.idle {
			return le.st.Clone()
		}
		return sluice.State{}
	}
	if e := sh.small.get(h, r.Namespace, r.Key); e != nil && now < e.idle {
		return sluice.State{T: e.t, N: e.n, M: e.m}
	}
	return sluice.State{}
}

// store writes r's state, inserting the key if needed.
func (s *Store) store(sh *shard, h uint64, r *sluice.Request, st sluice.State, idle int64) {
	now := r.Now.UnixMicro()
	if r.Algorithm.UsesLog(r.Limit) {
		key := r.Namespace + r.Key
		s.putLog(sh, key, sh.logs[key], st, idle, now)
		return
	}
	s.putSmall(sh, h, r.Namespace, r.Key, sh.small.get(h, r.Namespace, r.Key), &st, idle, now)
}

// Reset forgets r.Namespace+r.Key (sluice.Resetter): its next request
// finds it new.
func (s *Store) Reset(_ context.Context, r sluice.Request) error {
	h := s.hash(r.Namespace, r.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	delete(sh.logs, r.Namespace+r.Key)
	if i := sh.small.find(h, r.Namespace, r.Key); i >= 0 {
		sh.small.deleteAt(uint32(i))
	}
	sh.mu.Unlock()
	return nil
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
		n += sh.small.len() + len(sh.logs)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many keys were evicted, not at rest, to respect
// MaxKeys since the store was made.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }
