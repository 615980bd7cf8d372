package fleet

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// What an OverLimitCache remembers: its refusals, by key, in shards, each
// ending by the requests' clock (and, with StoreClock, by the monotonic
// clock too), and how they are looked up, stored and evicted.

type olKey struct {
	ns    string // Request.Namespace: limiters with the same limit but different names count apart
	key   string
	alg   sluice.Algorithm
	limit sluice.Limit
}

// olEntry is one remembered refusal, in microseconds of Request.Now.
type olEntry struct {
	cost      int64 // the refused cost: requests of at least this cost are refused
	until     int64 // refused while now < until
	reset     int64 // the instant the key would be full again
	remaining int64
	gen       uint64
	// end is until on this machine's monotonic clock (µs since
	// OverLimitCache.mono), with OverLimitOptions.StoreClock; else 0.
	end int64
}

type olShard struct {
	mu sync.RWMutex
	m  map[olKey]olEntry
	// dels counts the deletes from m since it was made: see compact.
	dels int
	_    [32]byte // keep shards' locks on separate cache lines
}

// compact copies m into a new map once as many keys were deleted from it
// as it may hold: a Go map whose keys come and go grows its tables (the
// deleted keys' slots are not all reused), so without it a shard holding
// at most per keys took ever more memory under wide traffic. A copy costs
// a step per key held, once per per deletes. sh.mu is held.
func (sh *olShard) compact(per int) {
	if sh.dels < per {
		return
	}
	m := make(map[olKey]olEntry, len(sh.m))
	for k, e := range sh.m {
		m[k] = e
	}
	sh.m, sh.dels = m, 0
}

// NewOverLimitCache returns a cache in front of s.
func NewOverLimitCache(s sluice.Store, o OverLimitOptions) *OverLimitCache {
	n := o.MaxKeys
	if n <= 0 {
		n = DefaultOverLimitKeys
	}
	c := &OverLimitCache{inner: s, seed: maphash.MakeSeed(), per: (n + overLimitShards - 1) / overLimitShards}
	if o.StoreClock {
		c.mono = time.Now()
	}
	for i := range c.shards {
		c.shards[i].m = make(map[olKey]olEntry)
	}
	return c
}

// Unwrap returns the store the cache is in front of.
func (c *OverLimitCache) Unwrap() sluice.Store { return c.inner }

// Hits returns how many requests the cache refused without asking the
// store.
func (c *OverLimitCache) Hits() uint64 { return c.hits.Load() }

// Stored returns how many refusals the cache has remembered.
func (c *OverLimitCache) Stored() uint64 { return c.stored.Load() }

// Len returns how many keys the cache holds, expired ones included until
// they are dropped.
func (c *OverLimitCache) Len() int {
	n := 0
	g := c.gen.Load()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			if e.gen == g {
				n++
			}
		}
		sh.mu.RUnlock()
	}
	return n
}

// Forget drops every remembered refusal, as if the cache were new: for a
// store that lost its data. Store errors call it.
func (c *OverLimitCache) Forget() { c.gen.Add(2) }

func (c *OverLimitCache) shard(k *olKey) *olShard {
	return &c.shards[maphash.String(c.seed, k.key)%overLimitShards]
}

// lookup answers r from the cache when a remembered refusal covers it.
// A refusal that has ended for r is dropped before r goes to the store: a
// caller whose clock steps back must not be refused from it once the
// store's state has moved past its end.
func (c *OverLimitCache) lookup(r *sluice.Request, d *sluice.Decision) bool {
	// A Now outside MinTime … MaxTime (the zero time included) is the
	// store's to refuse (or to ignore, with redisstore.Options.RedisTime).
	if sluice.CheckTime(r.Now) != nil || r.Cost < 0 || r.Force {
		return false
	}
	k := olKey{ns: r.Namespace, key: r.Key, alg: r.Algorithm, limit: r.Limit}
	sh := c.shard(&k)
	sh.mu.RLock()
	e, ok := sh.m[k]
	sh.mu.RUnlock()
	if !ok || e.gen != c.gen.Load() {
		return false
	}
	now := r.Now.UnixMicro()
	left := e.until - now
	if e.end != 0 {
		// On the store's own clock, what the monotonic clock says has
		// passed counts too: the requests' clock may have stepped back.
		left = min(left, e.end-c.since())
	}
	if left <= 0 {
		sh.mu.Lock()
		if cur, ok := sh.m[k]; ok && cur == e {
			delete(sh.m, k)
			sh.dels++
		}
		sh.mu.Unlock()
		return false
	}
	if r.Cost < e.cost {
		return false
	}
	*d = sluice.Decision{
		Allowed:    false,
		Limit:      r.Limit.Rate,
		Remaining:  e.remaining,
		RetryAfter: time.Duration(left) * time.Microsecond,
		ResetAfter: time.Duration(max(0, e.reset-now)) * time.Microsecond,
	}
	if r.Cost > r.Algorithm.Capacity(r.Limit) {
		d.RetryAfter = sluice.Never
	}
	return true
}

// olEpoch is what a refusal is remembered against: the generation and the
// resets before the store was asked. A refusal decided before a Forget or
// a Reset may come back after it, and then says nothing of the store's
// state: remember drops it.
// With StoreClock, mono is this machine's monotonic clock then (see
// since): the store decided no earlier.
type olEpoch struct {
	gen, resets uint64
	mono        int64
}

func (c *OverLimitCache) epoch() olEpoch {
	at := olEpoch{gen: c.gen.Load(), resets: c.resets.Load()}
	if !c.mono.IsZero() {
		at.mono = c.since()
	}
	return at
}

// since is µs since c.mono on this machine's monotonic clock, at least 1
// (olEntry.end 0 means none).
func (c *OverLimitCache) since() int64 { return max(1, time.Since(c.mono).Microseconds()) }

// remember records the store's refusal d of r, decided at r.Now, asked
// at at.
func (c *OverLimitCache) remember(r *sluice.Request, d *sluice.Decision, at olEpoch) {
	if d.Allowed || d.RetryAfter <= 0 || sluice.CheckTime(r.Now) != nil || r.Cost < 0 {
		return
	}
	cost := r.Cost
	switch {
	case r.Force:
		cost = 1 // the report was counted; RetryAfter is for a cost of 1
	case cost == 0:
		// A query is refused only while a report's debt lasts; its
		// shorter RetryAfter would stand in for the costlier requests'.
		return
	}
	t, err := r.Limit.Ticks()
	if err != nil {
		return
	}
	now := r.Now.UnixMicro()
	// The store decided at an instant no earlier than now, floored to its
	// tick: the first instant it admits is no earlier than
	// now − (tick − 1µs) + RetryAfter.
	e := olEntry{
		cost:      cost,
		until:     now - (t.Tick - 1) + d.RetryAfter.Microseconds(),
		reset:     now + d.ResetAfter.Microseconds(),
		remaining: d.Remaining,
		gen:       at.gen,
	}
	if at.mono != 0 {
		e.end = max(1, at.mono-(t.Tick-1)+d.RetryAfter.Microseconds())
	}
	if e.until <= now {
		return
	}
	k := olKey{ns: r.Namespace, key: r.Key, alg: r.Algorithm, limit: r.Limit}
	sh := c.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.resets.Load() != at.resets || c.gen.Load() != at.gen || at.gen&1 != 0 {
		// A Reset or a refund (maybe of this key) or a Forget since the
		// store was asked, or paused (see Pause).
		return
	}
	if old, ok := sh.m[k]; ok && old.gen == e.gen && now < old.until {
		// Keep the refusal that covers more requests: the smaller cost,
		// or for the same cost the later end (both are bounds; the later
		// one is the tighter).
		if old.cost < e.cost || old.cost == e.cost && old.until >= e.until {
			// A report may have moved the key's end further without
			// moving the refusal's (the log's oldest entry still leaves
			// first): both ends are the store's, the later one holds.
			if e.reset > old.reset {
				old.reset = e.reset
				sh.m[k] = old
			}
			return
		}
		e.reset = max(e.reset, old.reset)
	} else if !ok && len(sh.m) >= c.per {
		sh.evict(now, e.gen, c.per)
	}
	sh.compact(c.per)
	sh.m[k] = e
	c.stored.Add(1)
}

// evict makes room in a full shard: entries that have expired or belong to
// a forgotten generation go first; if that frees less than an eighth of the
// shard, arbitrary entries follow. Dropping an entry is always safe.
func (sh *olShard) evict(now int64, gen uint64, per int) {
	want := max(1, per/8)
	freed := 0
	for k, e := range sh.m {
		if e.gen != gen || now >= e.until {
			delete(sh.m, k)
			freed++
		}
	}
	for k := range sh.m {
		if freed >= want {
			break
		}
		delete(sh.m, k)
		freed++
	}
	sh.dels += freed
}
