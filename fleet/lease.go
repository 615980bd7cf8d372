package fleet

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// LeaseStore is the shared store a Lease decorates; *redisstore.Store is one.
type LeaseStore interface {
	sluice.Store
	// Lease reserves up to r.Cost units of r.Key's quota, atomically.
	// First it gives back the expired units of back, if any.
	Lease(ctx context.Context, r sluice.Request, back redisstore.ReturnOp) (redisstore.Grant, error)
	// Return gives back units reserved and not spent.
	Return(ctx context.Context, ops []redisstore.ReturnOp) error
}

// Lease is a hard limit: a sluice.Store that reserves quota from the shared
// store atomically, in chunks, and spends it locally. The fleet never admits
// more than the limit: every admission spends a unit the store counted
// before. It may admit less, by at most the units reserved and not spent:
// those of a window expire with it, a bucket's are dropped one Period after
// they were reserved, and Close gives back what is left.
//
// When the store has nothing left, the instance denies on its own until the
// store said a unit frees up (the end of the window, or the time a bucket
// refills enough for a chunk), so a key over its limit costs no round trip
// per request. Quota given back by another instance's Close meanwhile waits
// for that time, unless the instance is told of it (ForgetKey).
//
// It handles token_bucket, gcra, fixed_window and sliding_window_counter
// with one segment (see Sync for why not the others); a lease of the
// counter lasts until the end of the sub-window it was counted in, so that
// every unit spent was counted in the window it was spent in.
//
// Over a store on its own clock (redisstore.Options.RedisTime), the units
// also expire by this machine's monotonic clock since their grant, so a
// requests' clock that steps back does not make them outlive what the
// store counted them for (see leaseEntry.clock).
//
// Decisions: Remaining is the units held plus what the store had left at
// the last reservation (other instances may have taken some since);
// RetryAfter of a denial is the store's.
type Lease struct {
	inner LeaseStore
	opts  LeaseOptions

	mu    sync.Mutex
	keys  map[nsKey]*leaseEntry
	sweep int // sweep the keys when there are more than this
	skip  int // new keys refused at MaxKeys before the next sweep for room
	swept int // keys the sweeps looked at: their cost, for tests
	dels  int // keys deleted from keys since it was made (see compactKeys)
	// recent is the keys without an entry asked for in the current
	// second of request time (recentAt) and the one before (see warm).
	recent   recent
	recentAt int64
	closed   atomic.Bool

	calls, granted, returned, spent, local, overflow, cold atomic.Uint64
}

var _ sluice.Store = (*Lease)(nil)

// NewLease returns a Lease over inner.
func NewLease(inner LeaseStore, o LeaseOptions) (*Lease, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.MaxKeys = maxKeysOr(o.MaxKeys)
	return &Lease{inner: inner, opts: o, keys: make(map[nsKey]*leaseEntry), sweep: minSweep,
		recent: newRecent()}, nil
}

func (l *Lease) applies(r *sluice.Request) bool {
	if l.closed.Load() || !redisstore.Shareable(r.Algorithm, r.Limit) {
		return false
	}
	return l.opts.Applies == nil || l.opts.Applies(*r)
}

// LeaseStats are a Lease's counters since it started.
type LeaseStats struct {
	Calls    uint64 // reservations asked of the store
	Granted  uint64 // units reserved
	Returned uint64 // units given back: expired, and by Close
	Spent    uint64 // units spent on admitted requests
	Local    uint64 // decisions made locally
	Overflow uint64 // decisions made in the shared store: the key was new and MaxKeys were held
	Cold     uint64 // decisions made in the shared store: the key's first in a second or two
	Keys     int    // keys held now
}

// Stats returns the counters.
func (l *Lease) Stats() LeaseStats {
	l.mu.Lock()
	n := len(l.keys)
	l.mu.Unlock()
	return LeaseStats{Calls: l.calls.Load(), Granted: l.granted.Load(), Returned: l.returned.Load(), Spent: l.spent.Load(), Local: l.local.Load(), Overflow: l.overflow.Load(), Cold: l.cold.Load(), Keys: n}
}

// Take decides r on the units the instance holds, reserving more when they
// run out.
func (l *Lease) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	return l.take(ctx, &r)
}

// take is Take on a request the caller holds (TakeAll of one request
// passes its own).
func (l *Lease) take(ctx context.Context, r *sluice.Request) (sluice.Decision, error) {
	if !l.applies(r) {
		return l.inner.Take(ctx, *r)
	}
	t, err := check(r)
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("fleet: lease: take %q: %w", r.Key, err)
	}
	e, err := l.entry(r, t, true)
	if err == errCold {
		l.cold.Add(1)
		return l.inner.Take(ctx, *r)
	}
	if err == errFull {
		l.overflow.Add(1)
		return l.inner.Take(ctx, *r)
	}
	if err == errClosed {
		return l.inner.Take(ctx, *r)
	}
	defer e.mu.Unlock()
	var d sluice.Decision
	if err := l.ensure(ctx, e, r, r.Cost, &d); err != nil {
		return sluice.Decision{}, err
	}
	if r.Force && !d.Allowed {
		return l.charge(ctx, e, *r)
	}
	if d.Allowed {
		e.units -= r.Cost
		l.spent.Add(uint64(r.Cost))
		e.info(e.clock(r.Now), &d)
	}
	l.local.Add(1)
	return d, nil
}

// charge is Take for a report (Request.Force) that the units held do not
// cover: they go back to the store, which then charges the report, debt
// and all; the instance holds nothing for the key until its next
// reservation, which sees the debt. e.mu is held.
func (l *Lease) charge(ctx context.Context, e *leaseEntry, r sluice.Request) (sluice.Decision, error) {
	if err := l.giveUp(ctx, e, r.Now); err != nil {
		return sluice.Decision{}, fmt.Errorf("fleet: lease: report %q: %w", r.Key, err)
	}
	d, err := l.inner.Take(ctx, r)
	if err != nil {
		return d, fmt.Errorf("fleet: lease: report %q: %w", r.Key, err)
	}
	return d, nil // decided in the store, exactly: no reservation (Calls)
}

// giveUp gives back what e holds at now, before the store charges a
// report on its key: the instance then holds nothing for the key until
// its next reservation, which sees the debt. e.mu is held.
func (l *Lease) giveUp(ctx context.Context, e *leaseEntry, now time.Time) error {
	var ops []redisstore.ReturnOp
	if e.units > 0 {
		ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.units, Window: e.window, Now: now})
	}
	if e.expired > 0 {
		ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.expired, Window: e.expWindow, Now: now})
	}
	// Given back at most once: a give-back that fails may have run (its
	// reply lost), so the units are not held any more either way. Kept,
	// a later give-back (Close) would return them twice, and the store
	// would count less than the fleet admitted.
	e.units, e.expired, e.read, e.denyUntil, e.denyNeed = 0, 0, false, 0, 0
	if len(ops) > 0 {
		if err := l.inner.Return(ctx, ops); err != nil {
			return err
		}
		for _, op := range ops {
			l.returned.Add(uint64(op.Units))
		}
	}
	return nil
}

// ensure makes e hold at least need units at r.Now if the store can give
// them, and fills *d with the decision for need (Allowed if held). e.mu is
// held.
func (l *Lease) ensure(ctx context.Context, e *leaseEntry, r *sluice.Request, need int64, d *sluice.Decision) error {
	us := e.clock(r.Now)
	if e.given.Load() && e.given.Swap(false) {
		e.denyUntil, e.denyNeed = 0, 0 // units given back elsewhere (ForgetKey)
	}
	if e.units > 0 && (e.alg == sluice.TokenBucket || e.alg == sluice.GCRA) {
		e.units = min(e.units, e.valid(us))
	}
	if us >= e.until && e.units > 0 {
		// Expired: given back with the next grant (for the sliding
		// window counter it still weighs on the next sub-window).
		e.expired, e.expWindow = e.units, e.window
		e.units = 0
	}
	*d = sluice.Decision{Limit: e.ticks.Rate}
	e.info(us, d)
	capacity := e.ticks.Rate
	if e.alg == sluice.TokenBucket || e.alg == sluice.GCRA {
		capacity = e.ticks.Burst
	}
	over := need > capacity
	switch {
	case over && e.read:
		d.RetryAfter = sluice.Never
		return nil
	case e.units >= need && (need > 0 || e.read):
		d.Allowed = e.fits(us, need, d)
		return nil
	case us < e.denyUntil && need >= e.denyNeed:
		d.RetryAfter = e.retry(us, need, l.opts.Chunk)
		if d.RetryAfter == 0 { // another instance took what the view shows
			d.RetryAfter = time.Duration(e.denyUntil-us) * time.Microsecond
		}
		return nil
	}
	want := l.opts.Chunk
	if want == 0 {
		left := capacity
		if e.read {
			left = d.Remaining - e.units
		}
		want = max(1, (left+autoShare-1)/autoShare)
	}
	want = max(want, need-e.units)
	if need == 0 || over {
		want = 0 // a query: read what is left
	}
	q := *r
	q.Cost = want
	start := time.Now()
	back := redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.expired, Window: e.expWindow}
	// The expired units go back at most once: with a grant that fails
	// they may have (its reply lost), and must not be given back again.
	e.expired = 0
	g, err := l.inner.Lease(ctx, q, back)
	if l.opts.OnLease != nil {
		l.opts.OnLease(want, g.Units, time.Since(start), err)
	}
	if err != nil {
		return fmt.Errorf("fleet: lease: take %q: %w", r.Key, err)
	}
	l.calls.Add(1)
	l.granted.Add(uint64(g.Units))
	l.returned.Add(uint64(back.Units))
	if g.Units > 0 {
		if e.units == 0 || g.State.T != e.window && e.alg != sluice.TokenBucket && e.alg != sluice.GCRA {
			e.units = 0 // units of an older window are worth nothing now
		}
		e.units += g.Units
		e.window = g.State.T
		switch e.alg {
		case sluice.FixedWindow, sluice.SlidingWindowCounter:
			e.until = us + (windowStart(&e.ticks, &g.State) + e.ticks.Period*e.ticks.Tick - g.Now)
		default:
			e.until = math.MaxInt64 // see valid
		}
	}
	e.read, e.st, e.gnow, e.skew = true, g.State, g.Now, us-g.Now
	if g.Clock != 0 {
		e.own, e.ownAt, e.mono = true, us, start
	}
	if e.alg == sluice.TokenBucket || e.alg == sluice.GCRA {
		e.units = min(e.units, e.valid(us))
	}
	e.info(us, d)
	switch {
	case over:
		d.RetryAfter = sluice.Never
		return nil
	case e.units >= need:
		d.Allowed = e.fits(us, need, d)
		return nil
	}
	// Not enough: wait until the store, with the units held given back,
	// can give all of need.
	retry := e.retry(us, need, l.opts.Chunk)
	e.denyUntil, e.denyNeed = us+retry.Microseconds(), need
	d.RetryAfter = max(retry, time.Microsecond)
	return nil
}

// Close is CloseAt(time.Now()), for requests on the wall clock.
func (l *Lease) Close() error { return l.CloseAt(time.Now()) }

// CloseAt gives back every unit held and not expired at now, in one round
// trip (with redisstore's PublishRefunds, one more publishes the keys
// given back, many to a message), and sends later requests to the
// shared store. now is on the clock
// of the requests' Now, as a unit's expiry is: a window's units expire
// with the window, a bucket's as it refills past them. A decision under
// way meanwhile either finishes on its key's units before they are given
// back, or goes to the shared store: none reserves after CloseAt. Only the
// first call of CloseAt or Close does anything.
func (l *Lease) CloseAt(now time.Time) error {
	if l.closed.Swap(true) {
		return nil
	}
	// Lock the entries without holding l.mu: a TakeAll holds one entry
	// while it looks up the next under l.mu.
	l.mu.Lock()
	entries := make([]*leaseEntry, 0, len(l.keys))
	for _, e := range l.keys {
		entries = append(entries, e)
	}
	l.mu.Unlock()
	return l.giveBack(entries, now, false)
}

// ForgetAt gives back the units held for the keys match selects and not
// expired at now (on the requests' clock, as for CloseAt), in one round
// trip, and lets those keys go: a later decision of one starts over, as
// for a key never seen. The other keys keep their units. match gets each
// key's Namespace and Key. Use it when the keys are done with (their
// limit changed, or is no longer enforced here) and no decision of them
// is under way: a decision racing with ForgetAt makes the key anew, and
// may reserve units for it again. After CloseAt it does nothing.
func (l *Lease) ForgetAt(now time.Time, match func(namespace, key string) bool) error {
	if l.closed.Load() {
		return nil
	}
	return l.giveBack(removeMatching(&l.mu, &l.keys, &l.dels, match), now, true)
}

// Drop lets go of every key and the units it holds without giving them
// back: for a store that lost its data (a Redis restart without
// persistence, a failover to a replica that had not every count), where
// the units were counted on a state that is gone. Spent, they would pass
// the new state's limit; given back, they would take from it units others
// spent; and a key the old state had nothing left for would be refused
// until its units freed up there. A later decision of a key starts over,
// as for a key never seen. A reservation in flight finishes first; what
// it reserved is dropped too (the fleet admits less, never more). After
// CloseAt it does nothing.
func (l *Lease) Drop() {
	if l.closed.Load() {
		return
	}
	for _, e := range removeMatching(&l.mu, &l.keys, &l.dels, func(string, string) bool { return true }) {
		e.mu.Lock()
		e.units, e.expired = 0, 0
		e.dead.Store(true)
		e.mu.Unlock()
	}
}

// giveBack returns the units of entries held and not expired at now, and
// their expired units not yet returned, in one round trip; with forget it
// marks the entries dead (they are out of l.keys). l.mu is not held: a
// TakeAll holds one entry while it looks up the next under l.mu.
func (l *Lease) giveBack(entries []*leaseEntry, now time.Time, forget bool) error {
	var ops []redisstore.ReturnOp
	for _, e := range entries {
		e.mu.Lock()
		us := e.clock(now)
		if e.units > 0 && (e.alg == sluice.TokenBucket || e.alg == sluice.GCRA) {
			// Lapsed units are no longer in the store's debt: giving
			// them back would erase debt others left (see valid).
			e.units = min(e.units, e.valid(us))
		}
		if e.units > 0 && us < e.until {
			ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.units, Window: e.window, Now: now})
			e.units = 0
		}
		if e.expired > 0 {
			ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.expired, Window: e.expWindow, Now: now})
			e.expired = 0
		}
		if forget {
			e.dead.Store(true)
		}
		e.mu.Unlock()
	}
	if len(ops) == 0 {
		return nil
	}
	err := l.inner.Return(context.Background(), ops)
	if err == nil {
		for _, op := range ops {
			l.returned.Add(uint64(op.Units))
		}
	}
	return err
}

// ForgetKey ends the local refusal of key in namespace ns, for units of
// it given back elsewhere (another instance's CloseAt or ForgetAt, a
// refund: what redisstore.Store.WatchRefunds tells of, as it tells an
// OverLimitCache): a request of the key that the units held do not cover
// asks the store again, rather than being refused until the time the
// store said a unit frees up. The units held stay. It does not wait for
// a decision of the key under way: a refusal that decision leaves ends
// with the key's next decision. A RefundFeed calls it for each key
// WatchRefunds tells of.
func (l *Lease) ForgetKey(ns, key string) {
	l.mu.Lock()
	if e := l.keys[nsKey{ns, key}]; e != nil {
		e.given.Store(true)
	}
	l.mu.Unlock()
}
