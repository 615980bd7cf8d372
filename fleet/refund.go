package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
)

// The decorators give units back (sluice.Refunder) through the store they
// wrap, which holds the counts: Sync takes them out of the key's hits not
// yet sent first (see sync_refund.go); Lease gives back the units it holds for
// the key first, so that its next request asks the store; the OverLimitCache
// drops the key's remembered refusal; the Fallback gives back where the
// units were counted, memory or the shared store (see fallback_ledger.go).
// Over a store without Refund they give nothing back and return an error
// wrapping errors.ErrUnsupported.
var (
	_ sluice.Refunder = (*Sync)(nil)
	_ sluice.Refunder = (*Lease)(nil)
	_ sluice.Refunder = (*OverLimitCache)(nil)
	_ sluice.Refunder = (*Fallback)(nil)
)

// refunderOf returns s's Refund, or an error wrapping
// errors.ErrUnsupported naming the decorator (who) when s has none.
func refunderOf(s sluice.Store, who string, r *sluice.Request) (sluice.Refunder, error) {
	if rf, ok := s.(sluice.Refunder); ok {
		return rf, nil
	}
	return nil, fmt.Errorf("fleet: %s: refund %q: the store behind it (%T): %w", who, r.Key, s, errors.ErrUnsupported)
}

// Refund gives r.Cost units back to r's key in the shared store
// (sluice.Refunder), where the units the instance spent were counted.
// The units the instance holds for the key go back first (as before a
// report it charges there), so that its next request reserves again and
// sees the store's state after the refund: its figures, and its note that
// the store had nothing left, would otherwise be the last grant's.
func (l *Lease) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	rf, err := refunderOf(l.inner, "lease", &r)
	if err != nil {
		return sluice.Decision{}, err
	}
	if !l.applies(&r) {
		return rf.Refund(ctx, r)
	}
	if _, err := check(&r); err != nil {
		return sluice.Decision{}, fmt.Errorf("fleet: lease: refund %q: %w", r.Key, err)
	}
	l.mu.Lock()
	e := l.keys[keyOf(&r)]
	l.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.dead.Load() {
			if err := l.giveUp(ctx, e, r.Now); err != nil {
				return sluice.Decision{}, fmt.Errorf("fleet: lease: refund %q: %w", r.Key, err)
			}
		}
	}
	return rf.Refund(ctx, r)
}

// Refund gives r.Cost units back to r's key in the store
// (sluice.Refunder) and forgets the key's remembered refusal, so that
// the cache never refuses what the store would now admit. A refusal
// asked for before the refund and remembered after it is dropped too (as
// for Reset). Only this cache forgets: another instance's cache in front
// of the same store learns of the refund only through a feed of the
// store's refunds (ForgetKey; redisstore.Store.WatchRefunds), and
// without one still refuses the key until the RetryAfter it remembered.
func (c *OverLimitCache) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	rf, err := refunderOf(c.inner, "over-limit cache", &r)
	if err != nil {
		return sluice.Decision{}, err
	}
	d, err := rf.Refund(ctx, r)
	// Forgotten whatever the store answered: a refund that failed may
	// have been given back, and dropping a refusal is always safe.
	k := olKey{ns: r.Namespace, key: r.Key, alg: r.Algorithm, limit: r.Limit}
	sh := c.shard(&k)
	sh.mu.Lock()
	c.resets.Add(1)
	if _, ok := sh.m[k]; ok {
		delete(sh.m, k)
		sh.dels++
	}
	sh.mu.Unlock()
	if err != nil {
		c.failed(ctx, err)
	}
	return d, err
}
