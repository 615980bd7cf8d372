package fleet

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice"
)

// The TakeAll of Sync and of Lease share their frame: split the requests
// into those the decorator decides itself and those left to the shared
// store, decide the first in key order (each key locked once), then ask
// the store about the rest. What differs is the local decision.

// splitAll returns the indexes of the requests of rs that local reports
// the decorator decides, in key order, with their ticks, and the indexes of
// the others, left to the shared store. name ("sync", "lease") prefixes
// its errors.
func splitAll(name string, rs []sluice.Request, ds []sluice.Decision, local func(*sluice.Request) bool) (loc, rem []int, ticks []sluice.Ticks, err error) {
	if len(ds) != len(rs) {
		return nil, nil, nil, fmt.Errorf("fleet: %s: take all: %d decisions for %d requests", name, len(ds), len(rs))
	}
	ticks = make([]sluice.Ticks, len(rs))
	for i := range rs {
		if !local(&rs[i]) {
			rem = append(rem, i)
			continue
		}
		t, err := check(&rs[i])
		if err != nil {
			return nil, nil, nil, fmt.Errorf("fleet: %s: take all %q: %w", name, rs[i].Key, err)
		}
		ticks[i] = t
		loc = append(loc, i)
	}
	// Lock each key once, in key order.
	slices.SortStableFunc(loc, func(a, b int) int { return keyOf(&rs[a]).compare(keyOf(&rs[b])) })
	return loc, rem, ticks, nil
}

// takeRest asks inner about the requests rem of rs as one, into ds: without
// counting them (cost 0) when allowed, the local part's outcome, is false,
// each then allowed iff its cost fits what is left (what it alone would
// decide), a denied one's RetryAfter the time until the limit is full again
// (what the query tells: never early, perhaps late). It reports whether
// all of rs are allowed.
func takeRest(ctx context.Context, inner sluice.Store, rs []sluice.Request, ds []sluice.Decision, rem []int, allowed bool) (bool, error) {
	if len(rem) == 0 {
		return allowed, nil
	}
	rrs := make([]sluice.Request, len(rem))
	rds := make([]sluice.Decision, len(rem))
	for j, i := range rem {
		rrs[j] = rs[i]
		if !allowed {
			rrs[j].Cost = 0
		}
	}
	if err := inner.TakeAll(ctx, rrs, rds); err != nil {
		return false, err
	}
	for j, i := range rem {
		ds[i] = rds[j]
		if !allowed {
			// Asked without counting: the request fits iff its cost
			// does (as the daemon's fleetStore reads a query too), and
			// the query itself was admitted: a key in debt after a
			// report refuses a request of cost 0 too.
			ds[i].Allowed = rds[j].Allowed && rds[j].Remaining >= rs[i].Cost
			if !ds[i].Allowed && rs[i].Cost > 0 {
				// The query does not tell when the cost fits; once
				// the limit is full again it does (never early), and
				// past the capacity never.
				ds[i].RetryAfter = rds[j].ResetAfter
				if rs[i].Cost > rs[i].Algorithm.Capacity(rs[i].Limit) {
					ds[i].RetryAfter = sluice.Never
				}
			}
		}
	}
	return allowed && passed(rrs, rds), nil
}

// TakeAll decides rs as one: the requests Sync handles on copies of their
// views, the others in the shared store; all are counted only if every one
// is allowed. When a local request is denied, the others are asked without
// counting (cost 0).
func (s *Sync) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(rs) == 1 && len(ds) == 1 {
		// One request: Take, without TakeAll's bookkeeping (the daemon's
		// /v1/check and most proxied requests match one rule).
		d, err := s.take(ctx, &rs[0])
		ds[0] = d
		return err
	}
	loc, rem, ticks, err := splitAll("sync", rs, ds, s.applies)
	if err != nil {
		return err
	}
	if len(loc) == 0 {
		return s.inner.TakeAll(ctx, rs, ds)
	}
	entries := map[nsKey]*syncEntry{}
	views := map[*syncEntry]*sluice.State{}
	var held []*syncEntry
	defer func() {
		for _, e := range held {
			e.mu.Unlock()
			s.touch(e)
		}
	}()
	// release lets the entries held go, for acquire to wait for the batch
	// in flight, which settles them too; the decisions then start over.
	release := func() {
		for _, e := range held {
			e.mu.Unlock()
		}
		held = nil
	}
	nrem := len(rem)
	// retried is the entry of each key whose batch a pass waited for
	// before starting over (see acquire).
	var retried map[nsKey]*syncEntry
	var allowed bool
	var over, full int             // decided in the store: all of them, those past MaxKeys
	var overflowed map[nsKey]error // errFull or errClosed
start:
	for {
		clear(entries)
		clear(views)
		rem = rem[:nrem]
		allowed, over, full, overflowed = true, 0, 0, map[nsKey]error{}
		for _, i := range loc {
			r := &rs[i]
			e := entries[keyOf(r)]
			if e == nil || e.alg != r.Algorithm || e.limit != r.Limit {
				if e != nil {
					return fmt.Errorf("fleet: sync: take all %q: one key with two algorithms or limits", r.Key)
				}
				var err error
				if why := overflowed[keyOf(r)]; why != nil {
					err = why // the same key again: the store's too
				} else {
					var wait func()
					if len(held) > 0 {
						wait = release
					}
					e, _, err = s.acquire(ctx, r, ticks[i], nil, wait, retried[keyOf(r)])
				}
				if err == errRetry {
					if retried == nil {
						retried = map[nsKey]*syncEntry{}
					}
					retried[keyOf(r)] = e
					continue start
				}
				if err == errFull || err == errClosed {
					if err == errFull {
						full++
					}
					over++
					overflowed[keyOf(r)] = err
					rem = append(rem, i) // decided with the shared store's part, below
					continue
				} else if err != nil {
					return err
				}
				held = append(held, e)
				entries[keyOf(r)] = e
				v := e.view
				views[e] = &v
			}
			var d sluice.Decision
			if _, err := step(r, e.now(r), &d, views[e]); err != nil {
				return fmt.Errorf("fleet: sync: take all %q: %w", r.Key, err)
			}
			d.Remaining = max(0, d.Remaining)
			ds[i] = d
			allowed = allowed && (d.Allowed || r.Force)
		}
		break
	}
	s.overflow.Add(uint64(full))
	if allowed, err = takeRest(ctx, s.inner, rs, ds, rem, allowed); err != nil {
		return err
	}
	s.local.Add(uint64(len(loc) - over))
	if !allowed {
		return nil
	}
	// Commit: replay the requests on the views themselves, recording hits.
	for _, i := range loc {
		r := &rs[i]
		e := entries[keyOf(r)]
		if e == nil {
			continue // over MaxKeys, or closed: decided in the shared store
		}
		var d sluice.Decision
		if err := e.decide(r, e.now(r), &e.view, &d); err != nil {
			return err
		}
	}
	return nil
}

// TakeAll decides rs as one: every request Lease handles must be covered
// by units held (reserving more as needed), and the others allowed by the
// shared store; units are spent only if all are allowed. Units reserved for
// a request that ends up denied stay with the instance.
func (l *Lease) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(rs) == 1 && len(ds) == 1 {
		// One request: Take, without TakeAll's bookkeeping (the daemon's
		// /v1/check and most proxied requests match one rule).
		d, err := l.take(ctx, &rs[0])
		ds[0] = d
		return err
	}
	if err := l.settleReports(ctx, rs); err != nil {
		return err
	}
	loc, rem, ticks, err := splitAll("lease", rs, ds, func(r *sluice.Request) bool {
		return l.applies(r) && !r.Force // a report: charged by the store as is
	})
	if err != nil {
		return err
	}
	if len(loc) == 0 {
		err := l.inner.TakeAll(ctx, rs, ds)
		l.unread(rs, nil)
		return err
	}
	entries := map[nsKey]*leaseEntry{}
	need := map[*leaseEntry]int64{}
	var held []*leaseEntry
	defer func() {
		for _, e := range held {
			e.mu.Unlock()
		}
	}()
	allowed := true
	over := 0
	overflowed := map[nsKey]error{} // errFull or errClosed
	for _, i := range loc {
		r := &rs[i]
		e := entries[keyOf(r)]
		if e == nil {
			if why := overflowed[keyOf(r)]; why != nil {
				e, err = nil, why // the same key again: the store's too
			} else {
				e, err = l.entry(r, ticks[i], false)
			}
			if err == errFull || err == errClosed {
				if err == errFull {
					l.overflow.Add(1)
				}
				over++
				overflowed[keyOf(r)] = err
				rem = append(rem, i) // decided with the shared store's part, below
				continue
			}
			held = append(held, e)
			entries[keyOf(r)] = e
		} else if e.alg != r.Algorithm || e.limit != r.Limit {
			return fmt.Errorf("fleet: lease: take all %q: one key with two algorithms or limits", r.Key)
		}
		// A sum past the int64 range is past any capacity: keep it there
		// rather than let it wrap negative (which would fit anything).
		need[e] = min(need[e], math.MaxInt64-r.Cost) + r.Cost
		if err := l.ensure(ctx, e, r, need[e], &ds[i]); err != nil {
			return err
		}
		allowed = allowed && ds[i].Allowed
	}
	if allowed, err = takeRest(ctx, l.inner, rs, ds, rem, allowed); err != nil {
		return err
	}
	l.local.Add(uint64(len(loc) - over))
	if !allowed {
		return nil
	}
	for e, n := range need {
		e.units -= n
		l.spent.Add(uint64(n))
	}
	for _, i := range loc {
		if e := entries[keyOf(&rs[i])]; e != nil { // nil: over MaxKeys, the store's
			e.info(e.clock(rs[i].Now), &ds[i])
		}
	}
	l.unread(rs, entries)
	return nil
}

// settleReports gives back what the instance holds for the keys Lease
// handles that rs reports on (Request.Force), as Take's charge does: the
// store then charges each report on the key's whole state, the units held
// included, and decides it exactly.
func (l *Lease) settleReports(ctx context.Context, rs []sluice.Request) error {
	for i := range rs {
		r := &rs[i]
		if !r.Force || !l.applies(r) {
			continue
		}
		l.mu.Lock()
		e := l.keys[keyOf(r)]
		l.mu.Unlock()
		if e == nil {
			continue
		}
		e.mu.Lock()
		var err error
		if !e.dead.Load() {
			err = l.giveUp(ctx, e, r.Now)
		}
		e.mu.Unlock()
		if err != nil {
			return fmt.Errorf("fleet: lease: take all %q: %w", r.Key, err)
		}
	}
	return nil
}

// unread marks the views of the keys Lease handles that rs reported on
// (Request.Force: charged by the store as is) as no longer the store's
// state (the report's debt is not in them): their next query reads it
// again, as after Take's charge. held are the entries the caller holds.
func (l *Lease) unread(rs []sluice.Request, held map[nsKey]*leaseEntry) {
	for i := range rs {
		if !rs[i].Force || !l.applies(&rs[i]) {
			continue
		}
		if e := held[keyOf(&rs[i])]; e != nil {
			e.read = false
			continue
		}
		l.mu.Lock()
		e := l.keys[keyOf(&rs[i])]
		l.mu.Unlock()
		if e != nil {
			e.mu.Lock()
			e.read = false
			e.mu.Unlock()
		}
	}
}
