package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// giveBackDescriptors gives back the hits of the descriptors ds[idx...]
// (Descriptor.Negative, Envoy's is_negative_hits), each to its rule's
// counter, at now (sluice.Refunder): never more than the counter holds.
// The refunds go to the store together, each key's on its own goroutine
// but the first's (the refunds of one key in turn), so that a store that
// does not answer holds them one timeout, not one each (a store bounds the
// calls begun together by one deadline).
// Each is answered OK, its Decision the counter after the refund, as the
// reference service answers them (they bypass the over-limit check). A
// refund the store cannot make is counted as a store failure and logged
// with its hits (refundFailed), and leaves the descriptor OK without
// figures (not Asked); it changes nothing of the
// request's answer (a refund denies nothing). A refund refused because
// the client went away (clientGone) makes it return false; the others,
// made or not, stay as they ended.
// The refunds' store calls are timed in a, as takeDescriptors times its
// own: a request of refunds alone asked the store too. The first store
// call of each key's refunds is made with ctx, those made in turn after it
// with later (ctx, or ctx with the deadline they share).
func (e *Engine) giveBackDescriptors(ctx, later context.Context, a *attempt, ds []Descriptor, st []DescriptorStatus, idx []int, now time.Time) bool {
	if e.realClock {
		a.asked = true // observeDescriptors times the request from now
	} else {
		defer a.timed(time.Now())
	}
	var left atomic.Bool
	one := func(first, later context.Context, i int) {
		d, given, err := e.giveBackDescriptor(first, later, &ds[i], now)
		if err != nil {
			if clientGone(ctx) {
				left.Store(true)
				return
			}
			e.refundFailed(&ds[i], given, err)
			return
		}
		st[i] = DescriptorStatus{Decision: d, Asked: true}
	}
	// The refunds of one key go in turn, on one goroutine: a sharded
	// key's refund asks its shards what they have used before it gives
	// back, and the next must ask after it, as a refund of another call
	// would, or both would give back to the same shards what only one
	// of them holds, and hits would stay counted on the others.
	// The goroutines get their own copy of idx: captured by them, the
	// caller's would escape to the heap on every request, negative
	// descriptors or none.
	var wg sync.WaitGroup
	for j, i := range idx {
		if j == 0 || sameKeyBefore(ds, idx[:j], i) {
			continue
		}
		rest := slices.Clone(idx[j:])
		wg.Go(func() { sameKey(ctx, later, ds, rest, i, one) })
	}
	sameKey(ctx, later, ds, idx, idx[0], one)
	wg.Wait()
	return !left.Load()
}

// sameKeyBefore reports whether a descriptor of ds[idx...] has ds[i]'s key.
func sameKeyBefore(ds []Descriptor, idx []int, i int) bool {
	for _, k := range idx {
		if ds[k].Key == ds[i].Key {
			return true
		}
	}
	return false
}

// sameKey calls one, in their order, for the descriptors of ds[idx...]
// that have ds[first]'s key (idx starts at first): the first with ctx for
// its first store call, and later for every call after it.
func sameKey(ctx, later context.Context, ds []Descriptor, idx []int, first int, one func(context.Context, context.Context, int)) {
	for _, k := range idx {
		if ds[k].Key == ds[first].Key {
			one(ctx, later, k)
			ctx = later
		}
	}
}

// refundFailed counts and logs a refund of d the store could not make
// (but for given hits, given back by the shards refunded before it
// failed): its hits stay counted, which the caller will not see (its
// descriptor answers OK), so the line says how many, and of which key,
// and sluice_envoy_negative_hits_failed_total counts them.
// It shares the store failures' throttle, and no on_error applies to it.
func (e *Engine) refundFailed(d *Descriptor, given int64, err error) {
	e.metrics.StoreError()
	d.Metrics.GiveBackFailed(max(d.Cost-given, 0))
	if !e.storeLog.OK(e.now()) {
		return
	}
	msg := "store could not give back negative hits: they stay counted"
	if given > 0 {
		e.log.Warn(msg, "key", d.Key, "hits", max(d.Cost-given, 0), "given_back", given, "err", err, "suppressed", e.storeLog.Dropped())
		return
	}
	e.log.Warn(msg, "key", d.Key, "hits", d.Cost, "err", err, "suppressed", e.storeLog.Dropped())
}

// giveBackDescriptor gives d's hits back to its counter. A sharded rule's
// hits go back over its shards as a report's are charged (Options.Spread,
// each its share), or to one shard; with Options.Shards, what a shard
// has not counted goes to the others that have (see shardedParts). On an
// error, given is what the shards refunded before it were asked to give
// back (each gives back at most what it counts). Its first store call is
// made with ctx, those after it with later.
func (e *Engine) giveBackDescriptor(ctx, later context.Context, d *Descriptor, now time.Time) (_ sluice.Decision, given int64, _ error) {
	rf, ok := e.store.(sluice.Refunder)
	if !ok {
		return sluice.Decision{}, 0, fmt.Errorf("the store (%T): %w", e.store, errors.ErrUnsupported)
	}
	r := d.Rule
	req := sluice.Request{Key: d.Key, Algorithm: r.Algorithm, Limit: r.Limit, Cost: d.Cost, Now: now}
	n := 1
	if e.shard != nil {
		switch {
		case r.Shards.N >= 2:
			n = r.Shards.N
		case r.Shards.Auto && e.auto != nil && e.hotKeys != nil && e.hotKeys.Rule(r.FullName()).IsHot(strings.TrimPrefix(req.Key, r.Head())):
			n = e.auto()
		}
	}
	if n < 2 {
		out, err := rf.Refund(ctx, req)
		return out, 0, err
	}
	var parts []sluice.Request
	if e.shards != nil {
		var err error
		if parts, n, err = e.shardedParts(ctx, req, n); err != nil {
			return sluice.Decision{}, 0, err
		}
		if parts != nil {
			ctx = later // the shards were asked
		}
	}
	if parts == nil && e.spreadf != nil && req.Cost >= 2 {
		if parts = e.spreadf(req, n); len(parts) < 2 {
			parts = nil
		}
	}
	if parts == nil {
		req, n = e.sharded(req, n)
		out, err := rf.Refund(ctx, req)
		if err == nil && n > 1 {
			unshard(&out, r.Limit, n)
		}
		return out, 0, err
	}
	var out sluice.Decision
	for j, p := range parts {
		if j > 0 {
			ctx = later
		}
		x, err := rf.Refund(ctx, p)
		if err != nil {
			return sluice.Decision{}, given, err
		}
		given += p.Cost
		if j == 0 {
			out = x
		} else {
			fold(&out, x)
		}
	}
	unshard(&out, r.Limit, n)
	return out, given, nil
}

// shardedParts returns the refunds of req's hits over its n shards (n
// capped as the shards are), so that they give back as many as the
// shards count together, up to req.Cost: it asks every shard what it has
// used (one TakeAll of cost 0), gives each its share as before (the
// shard whose turn it is, or Spread's part) as far as it has used it,
// and the rest to the shards that have used more than their share, from
// the one whose turn it is on. A shard's refund never gives back more than it counts,
// so one that counted less than its share gave back less, and the hits
// stayed counted elsewhere. Shards with nothing to give back are left
// out; when no shard has used anything, the shard whose turn it is gets
// the whole cost (it gives back nothing, and answers). It returns no
// parts (and n) when the key is not sharded: req then goes to one shard.
func (e *Engine) shardedParts(ctx context.Context, req sluice.Request, n int) ([]sluice.Request, int, error) {
	q := req
	q.Cost = 0
	peeks := e.shards(q, n)
	if len(peeks) < 2 {
		return nil, n, nil
	}
	ds := make([]sluice.Decision, len(peeks))
	if err := e.store.TakeAll(ctx, peeks, ds); err != nil {
		return nil, n, err
	}
	turn := req
	e.shard(&turn, n)
	first := 0
	for i, p := range peeks {
		if p.Key == turn.Key && p.Namespace == turn.Namespace {
			first = i
		}
	}
	want := make([]int64, len(peeks)) // each shard's share, as before
	var sp []sluice.Request
	if e.spreadf != nil && req.Cost >= 2 {
		sp = e.spreadf(req, n)
	}
	if len(sp) >= 2 && len(sp) <= len(peeks) {
		for i := range sp {
			want[i] = sp[i].Cost // in shard order, from shard 0
		}
	} else {
		want[first] = req.Cost
	}
	cost := make([]int64, len(peeks))
	more := make([]int64, len(peeks)) // what each may give back past its share
	left := req.Cost
	for i, p := range peeks {
		used := max(0, p.Algorithm.Capacity(p.Limit)-ds[i].Remaining)
		cost[i] = min(want[i], used)
		more[i] = used - cost[i]
		left -= cost[i]
	}
	for k := 0; k < len(peeks) && left > 0; k++ {
		i := (first + k) % len(peeks)
		x := min(left, more[i])
		cost[i] += x
		left -= x
	}
	var parts []sluice.Request
	for i, p := range peeks {
		if cost[i] > 0 {
			p.Cost, p.Now = cost[i], req.Now
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		p := peeks[first]
		p.Cost, p.Now = req.Cost, req.Now
		parts = append(parts, p)
	}
	return parts, len(peeks), nil
}
