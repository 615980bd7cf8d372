package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// The decorators take within a bound (sluice.WithinTaker, for a leaky
// bucket Limiter.WaitN under a deadline) where the decision is made in
// one step: Sync and Lease never decide a leaky bucket locally (its queue
// hands out places no instance can assign alone; TestWithinNeverDecidedLocally
// holds them to it), so they pass it to the shared store's TakeWithin; the OverLimitCache answers a refusal it
// remembers (which takes nothing) and passes a miss on; the Fallback
// passes it to the shared store's, or in local mode to its memory's, at
// the local share. Over a store without TakeWithin they cannot keep the
// promise: TakeWithin then counts nothing and returns an error wrapping
// errors.ErrUnsupported, and WaitN asks and takes in two steps.
var (
	_ sluice.WithinTaker = (*Sync)(nil)
	_ sluice.WithinTaker = (*Lease)(nil)
	_ sluice.WithinTaker = (*OverLimitCache)(nil)
	_ sluice.WithinTaker = (*Fallback)(nil)
)

// bounded reports whether TakeWithin's bound applies to r: a leaky bucket
// request that counts (not a report, not a question at cost 0). For the
// others TakeWithin is Take.
func bounded(r *sluice.Request) bool {
	return r.Algorithm == sluice.LeakyBucket && !r.Force && r.Cost != 0
}

// withinOf returns s's TakeWithin, or an error wrapping
// errors.ErrUnsupported naming the decorator (who) when s has none.
func withinOf(s sluice.Store, who string, r *sluice.Request) (sluice.WithinTaker, error) {
	if wt, ok := s.(sluice.WithinTaker); ok {
		return wt, nil
	}
	return nil, fmt.Errorf("fleet: %s: take %q within a bound: the store behind it (%T): %w", who, r.Key, s, errors.ErrUnsupported)
}

// TakeWithin is Take, except that a leaky bucket request the shared store
// would admit with a Delay over within is not counted
// (sluice.WithinTaker): Sync passes it to the shared store's TakeWithin,
// one step there.
func (s *Sync) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if !bounded(&r) {
		d, err := s.take(ctx, &r)
		return d, false, err
	}
	wt, err := withinOf(s.inner, "sync", &r)
	if err != nil {
		return sluice.Decision{}, false, err
	}
	return wt.TakeWithin(ctx, r, within)
}

// TakeWithin is Take, except that a leaky bucket request the shared store
// would admit with a Delay over within is not counted
// (sluice.WithinTaker): Lease passes it to the shared store's TakeWithin,
// one step there.
func (l *Lease) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if !bounded(&r) {
		d, err := l.take(ctx, &r)
		return d, false, err
	}
	wt, err := withinOf(l.inner, "lease", &r)
	if err != nil {
		return sluice.Decision{}, false, err
	}
	return wt.TakeWithin(ctx, r, within)
}

// TakeWithin is Take, except that a leaky bucket request the store would
// admit with a Delay over within is not counted (sluice.WithinTaker): a
// refusal the cache remembers answers it, as Take; otherwise the store's
// TakeWithin decides, and a refusal it makes is remembered. A late
// request is not: the store would admit it.
func (c *OverLimitCache) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if !bounded(&r) {
		d, err := c.Take(ctx, r)
		return d, false, err
	}
	wt, err := withinOf(c.inner, "over-limit cache", &r)
	if err != nil {
		return sluice.Decision{}, false, err
	}
	var d sluice.Decision
	if c.lookup(&r, &d) {
		c.hits.Add(1)
		return d, false, nil
	}
	at := c.epoch()
	d, late, err := wt.TakeWithin(ctx, r, within)
	if err != nil {
		c.failed(ctx, err)
		return d, false, err
	}
	if !late {
		c.remember(&r, &d, at)
	}
	return d, late, nil
}

// TakeWithin is Take, except that a leaky bucket request that would be
// admitted with a Delay over within is not counted (sluice.WithinTaker):
// the shared store's TakeWithin decides it, or while that store cannot
// decide, the memory store's at the local share, each in one step. In
// store mode over a store without TakeWithin, the error wraps
// errors.ErrUnsupported.
func (f *Fallback) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if !bounded(&r) {
		d, err := f.Take(ctx, r)
		return d, false, err
	}
	if f.Mode() == ModeStore {
		wt, err := withinOf(f.primary, "fallback", &r)
		if err != nil {
			return sluice.Decision{}, false, err
		}
		d, late, err := wt.TakeWithin(ctx, r, within)
		if err == nil || !f.failed(ctx, err) {
			return d, late, err
		}
	}
	f.locally.Add(1)
	r.Limit = localShare(r.Algorithm, r.Limit, int(f.n))
	d, late, err := f.local.TakeWithin(ctx, r, within)
	if err == nil && !late {
		f.counted(&r, &d)
	}
	return d, late, err
}
