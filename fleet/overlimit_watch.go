package fleet

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
