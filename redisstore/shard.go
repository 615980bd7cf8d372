package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Sharding a hot key
//
// In a Redis Cluster every key lives on one node, so one very busy limiter
// key can saturate one node while the others idle. Sharding splits the
// key's limit over n Redis keys (shards) that sit in different Cluster
// slots, round-robin over the masters (shardTags): shard i holds an
// ordinary limiter of rate_i = ⌊rate/n⌋ (+1 for the first rate mod n
// shards) and burst_i split the same way, so the shards' limits add up to
// exactly the key's. Each decision goes to one shard (round-robin per
// key on each Store while the key stays in its cache of recently sharded
// keys; a key that comes back to it starts on a random shard), as one
// script on one node in one round trip, like an unsharded decision; the
// load of the key is spread over n nodes.
//
// Accuracy, for every algorithm: the shards together never admit more than
// the unsharded limit would (their rates and bursts add up to it). They
// may admit less: a request is refused when its own shard is out even if
// another still has room. With hits spread evenly this costs nothing in a
// steady overload (every shard saturates); around the limit, with I
// instances each spreading round-robin, the shards' counts differ by at most
// I, so a window admits at least min(sent, rate) − (n−1)·I requests of cost
// 1. Per algorithm:
//
//   - fixed_window, sliding_window_counter, sliding_window_log: each shard
//     is the window of rate_i; the log's memory per shard is rate_i.
//   - token_bucket, gcra: each shard refills at rate_i up to burst_i; a
//     burst arriving at once is admitted up to the sum of the shards' bursts
//     when spread evenly.
//   - leaky_bucket: the queue's capacity (burst + 1: the request leaving
//     now and burst waiting) is what is split, so the shards together hold
//     exactly the unsharded queue; each shard spaces its requests about
//     n×period/rate apart and the shards' outputs are not phase-aligned, so
//     the output is even on average but not request by request.
//   - A request whose cost exceeds its shard's burst (or rate for the
//     windows) goes to shard 0, whose share is the largest (the remainders
//     go to the first shards); one that exceeds shard 0's too is refused
//     with Never although the unsharded key might admit it: shard only
//     keys whose requests cost much less than burst/n.
//
// The number of shards is capped by the limit: never more than rate or
// burst, so that every shard admits at least one request.

// shardCache remembers the shard keys of recently sharded keys: a fixed
// number of entries, overwritten on collision (bounded, lock-free).
const shardCacheSize = 1024

type shardTags struct {
	key  string
	keys []string // the logical keys of the shards, in shard order
	// nodes is the slot map they were placed with (nil: none known);
	// once a map is read, the keys are placed again with it.
	nodes *slotMap
	// rr spreads the key's requests over its shards, round-robin. It is
	// per key: one counter shared by all keys would send, say, every
	// request's second of three sharded rules to the same shard. It
	// starts at random, so that a key that falls out of the cache and
	// comes back (more keys than cells) starts on a random shard, not
	// always on the same one.
	rr atomic.Uint64
}

// Shard rewrites r so that it goes to one of n shards of its key (the next
// one in the key's round-robin on this Store), with that shard's share of the limit.
// Its Namespace becomes ShardNamespace(r.Namespace), so that no unsharded
// key, whatever it is spelled, shares a shard's count.
// It returns the number of shards actually used (n capped by the limit's
// rate and burst), or 1 (r unchanged) when n < 2. Take, TakeAll and every
// Store decorator then treat the shard like any key. Fix the Decision of a
// sharded request with Unshard.
func (s *Store) Shard(r *sluice.Request, n int) int {
	n = shardCount(r.Algorithm, r.Limit, n)
	if n < 2 {
		return 1
	}
	t := s.shardTags(r.Key, n)
	i := int(t.rr.Add(1) % uint64(n))
	l := ShardLimit(r.Algorithm, r.Limit, n, i)
	if r.Cost > r.Algorithm.Capacity(l) && i > 0 {
		// Too large for this shard, which would answer Never: the
		// first shard's share is the largest, and may hold it.
		if l0 := ShardLimit(r.Algorithm, r.Limit, n, 0); r.Cost <= r.Algorithm.Capacity(l0) {
			i, l = 0, l0
		}
	}
	r.Limit = l
	r.Namespace, r.Key = ShardNamespace(r.Namespace), t.keys[i]
	return n
}

// ShardNamespace returns the Namespace of the shards of the keys of
// namespace ns: ns + "shard|". A shard's logical key is its key's plus
// "#" and a tag ("k#3"), which a client may spell as a key of its own; the
// namespace keeps the two apart, so that such a key is never counted in a
// shard's Redis key (a key of a Limiter's namespace, "NAME|ALG,LIMIT|",
// never ends in "|shard|", and the daemon's rules use none).
func ShardNamespace(ns string) string { return ns + shardMark }

const shardMark = "shard|"

// Spread returns r split over every shard of its key, for a charge that
// must weigh on the key as a whole: a report past the limit
// (sluice.Request.Force) is debt, which only holds the key back if every
// shard carries its part of it. Shard i's request has shard i's share of
// the limit and of the cost (split as ShardLimit splits the rate: the
// parts add up to r.Cost), so each shard's debt is in proportion to its
// share; shards whose part is 0 are left out. n is capped as Shard caps
// it; below 2, Spread returns r alone. Decide the requests with TakeAll.
func (s *Store) Spread(r sluice.Request, n int) []sluice.Request {
	n = shardCount(r.Algorithm, r.Limit, n)
	if n < 2 {
		return []sluice.Request{r}
	}
	t := s.shardTags(r.Key, n)
	out := make([]sluice.Request, 0, n)
	for i := range n {
		c := r.Cost / int64(n)
		if int64(i) < r.Cost%int64(n) {
			c++
		}
		if c == 0 && i > 0 {
			break // the parts only get smaller
		}
		q := r
		q.Namespace, q.Key, q.Limit, q.Cost = ShardNamespace(r.Namespace), t.keys[i], ShardLimit(r.Algorithm, r.Limit, n, i), c
		out = append(out, q)
	}
	return out
}

// Shards returns r sent to each of the n shards of its key, in shard order,
// each with its share of the limit and r's cost (n capped as Shard caps it),
// or nil when the key is not sharded (n below 2): with a cost of 0, the
// questions that read what every shard has used, without counting.
func (s *Store) Shards(r sluice.Request, n int) []sluice.Request {
	n = shardCount(r.Algorithm, r.Limit, n)
	if n < 2 {
		return nil
	}
	t := s.shardTags(r.Key, n)
	out := make([]sluice.Request, n)
	for i := range n {
		q := r
		q.Namespace, q.Key, q.Limit = ShardNamespace(r.Namespace), t.keys[i], ShardLimit(r.Algorithm, r.Limit, n, i)
		out[i] = q
	}
	return out
}

// ShardKeys returns the logical keys of the n shards of limiter key k, for
// inspection and tests. Shard i of a request r is counted in the Redis key
// KeyOf(&Request{Namespace: ShardNamespace(r.Namespace), Key: keys[i]}),
// in the slot of Key(keys[i]).
func (s *Store) ShardKeys(k string, n int) []string {
	return append([]string(nil), s.shardTags(k, n).keys...)
}

// shardCount is n capped by the limit: every shard must admit at least one
// request of cost 1 (for the leaky bucket, hold a queue of at least 2, since
// a burst of 0 would mean the rate).
func shardCount(a sluice.Algorithm, l sluice.Limit, n int) int {
	if n < 2 {
		return 1
	}
	n = int(min(int64(n), l.Rate, l.BurstOrRate()))
	if a == sluice.LeakyBucket {
		n = int(min(int64(n), (l.BurstOrRate()+1)/2))
	}
	return max(n, 1)
}

// ShardLimit returns shard i's share of l over n shards, for algorithm a:
// rate and burst divided, the remainders going to the first shards, so that
// the shares add up to l (for the leaky bucket the queue's capacity,
// burst + 1, is what adds up). n must not exceed what Shard would use.
func ShardLimit(a sluice.Algorithm, l sluice.Limit, n, i int) sluice.Limit {
	if n < 2 {
		return l
	}
	share := func(v int64) int64 {
		q := v / int64(n)
		if int64(i) < v%int64(n) {
			q++
		}
		return q
	}
	b := l.BurstOrRate()
	l.Rate = share(l.Rate)
	if a == sluice.LeakyBucket {
		l.Burst = share(b+1) - 1
	} else {
		l.Burst = share(b)
	}
	return l
}

// Unshard turns the decision of one shard of a key limited by l, over n
// shards, into the key's: Limit is l's rate and Remaining the shard's
// scaled by n (an estimate: the other shards are not read), at most the
// limit's burst (its rate when it has none).
func Unshard(d *sluice.Decision, l sluice.Limit, n int) {
	if n < 2 {
		return
	}
	d.Limit = l.Rate
	d.Remaining = min(d.Remaining*int64(n), l.BurstOrRate())
}

// shardTags returns the logical keys of the n shards of k: k + "#" + tag,
// the tags chosen in order 0, 1, 2, … so that each shard's Redis key is in
// a slot no earlier shard uses and, knowing the Cluster's slot map, on a
// master that holds the fewest earlier shards: the first shards go to
// masters no earlier shard uses, one each, and past one per master the
// shards go round again, so the shards per master differ by at most one.
// The choice depends only on k, n and the slot map, so every instance
// picks the same keys; shard i's tag depends only on the shards before it,
// so the shards of a smaller n are the first of a larger one. (Up to one
// shard per master the rule is the one earlier versions used, so those
// shards keep their Redis keys across an upgrade; see shardTries for the
// one exception.)
func (s *Store) shardTags(k string, n int) *shardTags {
	h := maphash.String(s.seed, k)
	cell := &s.shards[h%shardCacheSize]
	nodes := s.slotNodes.Load()
	if t := cell.Load(); t != nil && len(t.keys) == n && t.key == k && t.nodes == nodes {
		return t
	}
	if nodes == nil {
		s.retrySlots()
	}
	keys := make([]string, 0, n)
	usedSlots := make(map[uint16]bool, n)
	var per []int // shards per master, by master index
	least := 0    // the fewest shards on a master
	if nodes != nil {
		per = make([]int, nodes.count)
	}
	tag := 0
	for len(keys) < n {
		// At most shardTries tries per shard, then take whatever slot
		// comes (see shardTries).
		for tries := 0; ; tries++ {
			c := k + "#" + strconv.Itoa(tag)
			tag++
			if !s.opts.Cluster || tries >= shardTries {
				keys = append(keys, c)
				if s.opts.Cluster && nodes != nil {
					per[nodes.of[slot(s.Key(c))]]++
					least = slices.Min(per)
				}
				break
			}
			sl := slot(s.Key(c))
			if usedSlots[sl] {
				continue
			}
			if nodes != nil && per[nodes.of[sl]] > least {
				continue
			}
			usedSlots[sl] = true
			if nodes != nil {
				per[nodes.of[sl]]++
				least = slices.Min(per)
			}
			keys = append(keys, c)
			break
		}
	}
	t := &shardTags{key: k, keys: keys, nodes: nodes}
	t.rr.Store(rand.Uint64())
	cell.Store(t)
	return t
}

// shardTries bounds the tags tried for one shard. A fresh tag lands on a
// master with probability p, that master's part of the slots: on masters
// of even parts within a few tries; on a master of 1,000 slots in 16,384
// the search fails with probability (1 − p)²⁵⁶ = 1.0·10⁻⁷ (1.8 % with the
// 64 tries of earlier versions, which named shards alike except where
// their search gave up). Past it the shard takes the next tag whatever
// its slot (a master with very few slots may then get no shard).
const shardTries = 256

// slotMap is the Cluster's slot → master assignment, by master index.
type slotMap struct {
	of    [16384]uint16
	count int
}

// loadSlots reads the Cluster's slot map (CLUSTER SLOTS) for shard
// placement. Failing is harmless: shards then only avoid sharing slots.
func (s *Store) loadSlots(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.Timeout, 1e9))
	defer cancel()
	if f := slotsFault; f != nil {
		if err := f(ctx); err != nil {
			return fmt.Errorf("redisstore: cluster slots: %w", err)
		}
	}
	ranges, err := s.c.Do(ctx, s.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: cluster slots: %w", err)
	}
	m := &slotMap{}
	ids := map[string]uint16{}
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return fmt.Errorf("redisstore: cluster slots: malformed range")
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || lo < 0 || hi > 16383 || lo > hi {
			return fmt.Errorf("redisstore: cluster slots: malformed range")
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		addr := host + ":" + strconv.FormatInt(port, 10)
		id, ok := ids[addr]
		if !ok {
			id = uint16(len(ids))
			ids[addr] = id
		}
		for sl := lo; sl <= hi; sl++ {
			m.of[sl] = id
		}
	}
	m.count = len(ids)
	if old := s.slotNodes.Load(); old != nil && *old == *m {
		return nil // unchanged: the shard keys made with it stay
	}
	s.slotNodes.Store(m)
	return nil
}

// slotsFault, set by tests, makes loadSlots fail when it returns an error.
var slotsFault func(context.Context) error

// Masters returns the number of Cluster masters in the slot map (1
// without Cluster): the natural number of shards. The map is read when the
// Store connects; if that failed, Masters is 1 until a later read, which a
// call of Masters (or a sharded decision) starts in the background at most
// once per slotRetry.
func (s *Store) Masters() int {
	if m := s.slotNodes.Load(); m != nil {
		return m.count
	}
	s.retrySlots()
	return 1
}

// slotRetry is the least time between two reads of the slot map while it
// is unknown.
const slotRetry = time.Second

// slotRefresh is how often a Cluster store reads the slot map again: after
// a resharding, stores opened before it and after it place shards alike
// within about this long (each counting a key on other shards meanwhile).
var slotRefresh = 10 * time.Second

// watchSlots reads the slot map every slotRefresh until Close, so that a
// resharding reaches the placement of shards without a restart: the map
// of a store opened before it would otherwise differ for good from that of
// one opened after, and a key would be counted on two sets of shards (two
// budgets) by the fleet.
func (s *Store) watchSlots() {
	s.slotsCtx, s.stopSlots = context.WithCancel(context.Background())
	every := slotRefresh // read here: a test sets it around New
	s.goSlots(func(ctx context.Context) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.slotsRead.Store(time.Now().UnixNano())
				_ = s.loadSlots(ctx) // a failure keeps the map known
			}
		}
	})
}

// goSlots runs read in the background until Close, which cancels its
// context and waits for it; after Close it does not run read.
func (s *Store) goSlots(read func(ctx context.Context)) {
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	if s.slotsCtx == nil || s.slotsCtx.Err() != nil {
		return
	}
	s.slotsWG.Add(1)
	go func() {
		defer s.slotsWG.Done()
		read(s.slotsCtx)
	}()
}

// closeSlots ends the background reads of the slot map and waits for them.
func (s *Store) closeSlots() {
	s.slotsMu.Lock()
	stop := s.stopSlots
	if stop != nil {
		stop() // under slotsMu: goSlots adds nothing to slotsWG after this
	}
	s.slotsMu.Unlock()
	if stop != nil {
		s.slotsWG.Wait()
	}
}

// retrySlots reads the slot map again, in the background, if it is unknown
// and the last read began slotRetry ago or more.
func (s *Store) retrySlots() {
	if !s.opts.Cluster || s.slotNodes.Load() != nil {
		return
	}
	now := time.Now().UnixNano()
	last := s.slotsRead.Load()
	if now-last < int64(slotRetry) || !s.slotsRead.CompareAndSwap(last, now) {
		return
	}
	s.goSlots(func(ctx context.Context) { _ = s.loadSlots(ctx) }) // a failure leaves it unknown: retried later
}

// shardState is the part of Store sharding uses.
type shardState struct {
	seed      maphash.Seed
	shards    [shardCacheSize]atomic.Pointer[shardTags]
	slotNodes atomic.Pointer[slotMap]
	slotsRead atomic.Int64 // unix ns: when the last read of the slot map began

	// The background reads of the slot map (see goSlots); nil and zero
	// without Cluster.
	slotsMu   sync.Mutex
	slotsCtx  context.Context
	stopSlots func()
	slotsWG   sync.WaitGroup
}
