package fleet

import (
	"slices"

	"github.com/sluicehq/sluice/redisstore"
)

// # Refunds made elsewhere
//
// A refund (sluice.Refunder) breaks the monotony the cache relies on: the
// key admits again before its remembered refusal ends; so do a Lease's
// units handed back and a cross-slot TakeAll's refund in Redis. A refund
// made through this cache drops its key's refusal (Refund); one made
// through another instance's store cannot be seen here, so an instance in
// a fleet learns of it from the store: redisstore.Store.WatchRefunds
// subscribes to the give-backs its fleet's stores publish
// (redisstore.Options.PublishRefunds: refunds, leases handed back,
// cross-slot refunds) and calls ForgetKey for each, Resume once
// subscribed and Pause whenever it is not (connecting, after a
// disconnect). While paused the cache answers nothing from its memory
// and remembers nothing, and each Pause and Resume forgets everything: a
// refund published while the instance was not listening can leave no
// refusal behind.

// ForgetKey drops every remembered refusal of key in namespace ns (for
// every algorithm and limit), and the refusals asked for before it and
// still on their way (as Reset does): for a refund of the key made
// elsewhere (see WatchRefunds in redisstore). It costs a scan of one of
// the cache's 64 parts, under its lock.
func (c *OverLimitCache) ForgetKey(ns, key string) {
	sh := c.shard(&olKey{key: key}) // by key alone: every entry of key is in it
	sh.mu.Lock()
	c.resets.Add(1)
	for k := range sh.m {
		if k.key == key && k.ns == ns {
			delete(sh.m, k)
			sh.dels++
		}
	}
	sh.mu.Unlock()
}

// Pause forgets every remembered refusal and keeps the cache from
// answering or remembering any until Resume: every request goes to the
// store. For a caller that has lost the feed of refunds made elsewhere
// (see ForgetKey), which may have missed some. Pause on a paused cache
// forgets again (nothing is remembered meanwhile).
func (c *OverLimitCache) Pause() {
	for {
		g := c.gen.Load()
		if c.gen.CompareAndSwap(g, g+1+g&1) { // odd: paused
			return
		}
	}
}

// Resume forgets every remembered refusal and lets the cache answer and
// remember again: for a caller whose feed of refunds made elsewhere is
// back (subscribed again), from which on it sees every refund. Refusals
// asked for before Resume are not remembered. Resume on a cache not
// paused only forgets.
func (c *OverLimitCache) Resume() {
	for {
		g := c.gen.Load()
		if c.gen.CompareAndSwap(g, g+2-g&1) { // even: live
			return
		}
	}
}

// Paused reports whether the cache is paused (see Pause).
func (c *OverLimitCache) Paused() bool { return c.gen.Load()&1 != 0 }

var (
	_ redisstore.RefundListener = (*OverLimitCache)(nil)
	_ redisstore.RefundListener = (*RefundFeed)(nil)
)

// RefundFeed tells a stack of decorators of the give-backs made elsewhere
// (refunds, leases handed back, cross-slot refunds): it is the one
// redisstore.RefundListener a program passes to
// redisstore.Store.WatchRefunds, whatever the stack holds. Each key goes
// to every Lease (Lease.ForgetKey: one refusing the key on its own asks
// the store again) and then to the OverLimitCache (ForgetKey): the leases
// first, so that a request the cache lets through once it forgot does not
// meet a lease still refusing, whose refusal the cache would remember
// again. Pause and Resume go to the cache. Sync and Fallback need no feed:
// a Sync reads each key it holds again from the store every interval or
// two, and a Fallback decides in the store, or in memory where no other
// instance gives back.
type RefundFeed struct {
	cache  *OverLimitCache
	leases []*Lease
}

// NewRefundFeed returns the feed of cache (nil for a stack without one)
// and of leases (none for a stack without a Lease).
func NewRefundFeed(cache *OverLimitCache, leases ...*Lease) *RefundFeed {
	return &RefundFeed{cache: cache, leases: slices.Clone(leases)}
}

// ForgetKey tells the leases, then the cache, that units of key in
// namespace ns were given back elsewhere.
func (f *RefundFeed) ForgetKey(ns, key string) {
	for _, l := range f.leases {
		l.ForgetKey(ns, key)
	}
	if f.cache != nil {
		f.cache.ForgetKey(ns, key)
	}
}

// Pause pauses the cache (OverLimitCache.Pause): the feed may miss
// give-backs until Resume. A Lease needs no pause: a give-back it misses
// leaves it refusing a key only until a unit frees up in the store (the
// fleet admits less, never more).
func (f *RefundFeed) Pause() {
	if f.cache != nil {
		f.cache.Pause()
	}
}

// Resume resumes the cache (OverLimitCache.Resume): from now on the feed
// sees every give-back.
func (f *RefundFeed) Resume() {
	if f.cache != nil {
		f.cache.Resume()
	}
}
