package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// DefaultOverLimitKeys is how many over-limit keys an OverLimitCache
// remembers when OverLimitOptions.MaxKeys is 0.
const DefaultOverLimitKeys = 100_000

// overLimitShards is the number of independently locked parts of the cache.
const overLimitShards = 64

// OverLimitOptions configure an OverLimitCache.
type OverLimitOptions struct {
	// MaxKeys bounds how many keys are remembered; 0 means
	// DefaultOverLimitKeys. Past it, expired entries are dropped first,
	// then arbitrary ones: forgetting a refusal only costs a store call.
	MaxKeys int
	// StoreClock says the store decides on its own clock, not at
	// Request.Now (redisstore.Options.RedisTime, as the daemon runs it): a
	// refusal then also ends once this machine's monotonic clock says its
	// RetryAfter has passed since the store was asked, so that a requests'
	// clock that steps back (an NTP step, a VM resumed) does not make it
	// outlive the store's.
	StoreClock bool
}

// OverLimitCache is a sluice.Store that remembers the refusals of the store
// it wraps and answers requests it knows would be refused without asking
// that store again: a key over its limit under overload costs one store
// call per retry_after instead of one per request.
//
// # Why it is exact
//
// Every algorithm is monotone: as long as nothing else arrives, a key that
// refuses a request of cost c at t keeps refusing it until t + RetryAfter,
// which is the first instant it would admit it; anything that arrives
// meanwhile only fills the key further; and a request of a larger cost fits
// no sooner than one of cost c. So after a refusal of cost c with
// RetryAfter r at t, every request of cost ≥ c for the same key, algorithm
// and limit is refused until t + r, whoever sends it — which is what the
// cache answers, for every algorithm (the leaky bucket's queue, the log's
// entries, the counter's estimate and the window's count only drain with
// time). It never refuses what the store would admit, and decides nothing
// else: requests of a smaller cost, and every request once t + r has
// passed, go to the store. A refusal whose RetryAfter is sluice.Never (a
// cost larger than the limit's capacity) is not remembered.
//
// Times are those of Request.Now, and the argument needs the store's clock
// to be monotone per key: the algorithms count a request older than a
// key's latest one at that latest instant. That holds for a store that
// reads its own clock (redisstore.Options.RedisTime, as the daemon runs it)
// and for callers sharing one monotone clock; the cache also drops a
// refusal as soon as one of its own requests passes its end, so a caller
// whose clock steps back is not refused from it. Across instances whose
// clocks are passed in and disagree, a refusal may outlive the store's by
// up to the skew. With a store that reads its own clock
// (redisstore.Options.RedisTime), t is the caller's clock before the call,
// which is no later than the store's decision instant as seen from the
// caller, so the bound still holds whatever the skew between the clocks;
// the cache then ends each refusal up to one tick early for limits that
// count in ticks coarser than a microsecond. Such a store's clock runs on
// when the caller's steps back (an NTP step): with
// OverLimitOptions.StoreClock, each refusal also ends once this machine's
// monotonic clock says its RetryAfter has passed since the store was
// asked, so it never outlives the store's. A Request with a zero Now is
// never answered from the cache, nor is one outside sluice.MinTime …
// sluice.MaxTime (the store refuses it).
//
// The store losing its data (a Redis restart without persistence, a
// failover to a replica that lagged) can make it admit earlier than it
// said, and the cache guards against it as far as it can see it: every
// store error makes the cache forget everything, since the store may come
// back without its state; a restart between two calls fails no call, so a
// caller that can see it (redisstore.Store.RunIDs changing, as the daemon
// checks every second) calls Forget.
//
// A give-back makes the key admit again before its refusal ends: a refund
// (sluice.Refunder), and with redisstore, on Redis Cluster, a TakeAll
// across slots refunding what it briefly took (which the store's other
// clients may have seen as used), and a Lease's units handed back. A
// refund through this cache (Refund) forgets the key; the others, and
// those made through another instance, reach this cache only through a
// feed of the store's give-backs: ForgetKey, Pause and Resume, which
// redisstore.Store.WatchRefunds calls (see overlimit_watch.go). Without
// one, a fleet that gives back keeps refusing such a key until the
// refusal's end.
//
// # What a remembered refusal answers
//
// A hit returns Allowed false, Limit, RetryAfter until t + r (exact for
// cost c when nothing else arrived; a lower bound for a larger cost, or
// sluice.Never when the cost exceeds the limit's capacity), ResetAfter
// until t + the refusal's ResetAfter, and the refusal's Remaining, which is
// exact for refusals of cost 1 (0 while they last) and a lower bound
// otherwise.
//
// TakeAll is refused from the cache when any of its requests is: then
// nothing is counted anywhere, as the store would do. The requests not in
// the cache are reported Allowed (with their Limit and no other figures),
// since they were not asked; a caller that needs each rule's own verdict
// in a refused TakeAll must ask the store.
//
// A report (Request.Force) is never answered from the cache: it must be
// charged. It keeps the cache exact, since a charge can only make a key
// refuse for longer, so every remembered refusal still holds. A report
// past the limit is remembered as a refusal of cost 1 (its RetryAfter is
// when a request of cost 1 is admitted again); in TakeAll only when it was
// counted, that is when every other request was admitted.
//
// Shadow rules (engine) ask through Take like any other: a remembered
// refusal is still reported as a refusal, so it counts as shadow_denied.
//
// An OverLimitCache is safe for concurrent use.
type OverLimitCache struct {
	inner  sluice.Store
	seed   maphash.Seed
	mono   time.Time // with StoreClock: the origin of olEntry.end
	shards [overLimitShards]olShard
	per    int           // entries per shard
	gen    atomic.Uint64 // bumped by Forget (by 2), Pause and Resume: entries of older generations are gone; odd while paused
	resets atomic.Uint64 // bumped by Reset, under the key's shard lock
	hits   atomic.Uint64
	stored atomic.Uint64
}

var (
	_ sluice.Store    = (*OverLimitCache)(nil)
	_ sluice.Resetter = (*OverLimitCache)(nil)
)

// Take answers r from the cache when a remembered refusal covers it, and
// otherwise asks the store, remembering a refusal.
func (c *OverLimitCache) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	var d sluice.Decision
	if c.lookup(&r, &d) {
		c.hits.Add(1)
		return d, nil
	}
	at := c.epoch()
	d, err := c.inner.Take(ctx, r)
	if err != nil {
		c.failed(ctx, err)
		return d, err
	}
	c.remember(&r, &d, at)
	return d, nil
}

// TakeAll refuses rs from the cache when a remembered refusal covers any of
// them (nothing is counted; the requests not in the cache are reported
// Allowed, not having been asked), and otherwise asks the store,
// remembering each refused request.
func (c *OverLimitCache) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) == len(rs) && c.takeAllCached(rs, ds) {
		c.hits.Add(1)
		return nil
	}
	at := c.epoch()
	if err := c.inner.TakeAll(ctx, rs, ds); err != nil {
		c.failed(ctx, err)
		return err
	}
	if !sluice.AllAllowed(ds) {
		counted := passed(rs, ds) // only reports refused: everything was counted
		for i := range rs {
			// Uncounted, a request after another of its key was refused on
			// the state that one would have left, not on the key's own.
			if counted || !rs[i].Force && !keyBefore(rs, i) {
				c.remember(&rs[i], &ds[i], at)
			}
		}
	}
	return nil
}

// keyBefore reports whether a request before rs[i] has its namespace and key.
func keyBefore(rs []sluice.Request, i int) bool {
	for j := range i {
		if rs[j].Key == rs[i].Key && rs[j].Namespace == rs[i].Namespace {
			return true
		}
	}
	return false
}

func (c *OverLimitCache) takeAllCached(rs []sluice.Request, ds []sluice.Decision) bool {
	hit := false
	for i := range rs {
		if c.lookup(&rs[i], &ds[i]) {
			hit = true
			continue
		}
		// Only well-formed requests may be answered without the store,
		// which would report the others' errors.
		r := &rs[i]
		if r.Cost < 0 || !r.Algorithm.Valid() || r.Algorithm.ValidateLimit(r.Limit) != nil || sluice.CheckTime(r.Now) != nil {
			return false
		}
		ds[i] = sluice.Decision{Allowed: true, Limit: r.Limit.Rate}
	}
	return hit
}

// Reset forgets r's remembered refusal and resets r's key in the store
// (sluice.Resetter); if the store cannot reset keys, the error wraps
// errors.ErrUnsupported (the refusal is forgotten all the same).
func (c *OverLimitCache) Reset(ctx context.Context, r sluice.Request) error {
	err := fmt.Errorf("fleet: reset %q: the store behind the over-limit cache (%T): %w", r.Key, c.inner, errors.ErrUnsupported)
	if rs, ok := c.inner.(sluice.Resetter); ok {
		err = rs.Reset(ctx, r)
	}
	// Forget after the store's reset, and void the refusals asked for
	// before it and still on their way (see remember).
	k := olKey{ns: r.Namespace, key: r.Key, alg: r.Algorithm, limit: r.Limit}
	sh := c.shard(&k)
	sh.mu.Lock()
	c.resets.Add(1)
	if _, ok := sh.m[k]; ok {
		delete(sh.m, k)
		sh.dels++
	}
	sh.mu.Unlock()
	return err
}

// failed forgets every refusal after a store failure: the store may come
// back without its data (a restart, a failover to a lagging replica).
// A cancelled caller says nothing about the store.
func (c *OverLimitCache) failed(ctx context.Context, err error) {
	if ctx.Err() == nil && isUnavailable(err) {
		c.Forget()
	}
}

// passed reports whether the TakeAll of rs that decided ds counted them:
// every request was admitted or is a report (Request.Force), which never
// makes the others fail.
func passed(rs []sluice.Request, ds []sluice.Decision) bool {
	for i := range ds {
		if !ds[i].Allowed && !rs[i].Force {
			return false
		}
	}
	return true
}

// isUnavailable reports whether err says the store could not decide.
func isUnavailable(err error) bool { return errors.Is(err, sluice.ErrStoreUnavailable) }
