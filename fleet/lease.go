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

// LeaseOptions configure a Lease.
type LeaseOptions struct {
	// Chunk is how many units the instance reserves at a time; it gets
	// fewer when fewer are left. 0 is auto: a sixteenth of what the
	// instance last saw left (at least one), so the chunks shrink as the
	// limit nears and the last units go one by one.
	Chunk int64
	// Applies selects the requests Lease decides; the others go to the
	// shared store unchanged. Nil selects every request whose algorithm
	// can be shared (redisstore.Shareable). It is called on every request
	// of such an algorithm, with a copy of it (see SyncOptions.Applies).
	Applies func(sluice.Request) bool
	// OnLease, if set, is called after every reservation with the units
	// asked and granted, how long the round trip took, and its error.
	OnLease func(asked, granted int64, took time.Duration, err error)
	// MaxKeys bounds the keys Lease holds (a lease and the store's state
	// at its grant, about two hundred bytes each); 0 means
	// DefaultLeaseMaxKeys. While it holds that many, and none can be let
	// go (idle a period, with no unit reserved and no refusal pending), a
	// key it does not hold is decided in the shared store, exactly (one
	// round trip, as without Lease: still never over the limit), and
	// counted in LeaseStats.Overflow.
	MaxKeys int
}

// Validate reports whether o can be used.
func (o LeaseOptions) Validate() error {
	if o.Chunk < 0 {
		return fmt.Errorf("fleet: lease: chunk %d must not be negative (0 is auto)", o.Chunk)
	}
	return checkMaxKeys("lease", o.MaxKeys)
}

// autoShare is the part of what is left that an auto lease reserves.
const autoShare = 16

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
// for that time.
//
// It handles token_bucket, gcra, fixed_window and sliding_window_counter
// with one segment (see Sync for why not the others); a lease of the
// counter lasts until the end of the sub-window it was counted in, so that
// every unit spent was counted in the window it was spent in.
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
	// recent is the keys without an entry asked for in the current
	// second of request time (recentAt) and the one before (see warm).
	recent   recent
	recentAt int64
	closed   atomic.Bool

	calls, granted, returned, spent, local, overflow, cold atomic.Uint64
}

var _ sluice.Store = (*Lease)(nil)

type leaseEntry struct {
	key   nsKey
	alg   sluice.Algorithm
	limit sluice.Limit
	ticks sluice.Ticks

	mu        sync.Mutex
	dead      atomic.Bool  // swept: look the key up again
	used      int64        // µs: the latest request time decided
	units     int64        // reserved, not spent
	window    int64        // the State.T of the grant, to give units back
	until     int64        // µs: the units expire then
	expired   int64        // units of an expired lease, given back with the next grant
	expWindow int64        // their window
	read      bool         // st holds the store's state at a grant
	st        sluice.State // the store's state after the last grant
	gnow      int64        // µs: the store's time at it
	skew      int64        // µs: the instance's clock minus the store's, at it
	denyUntil int64        // µs: the store has nothing for us until then…
	denyNeed  int64        // …for requests needing this many units or more
}

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

// entry returns r's entry, locked; errFull if r's key is new and MaxKeys
// keys are held; with cold, errCold if r's key is cold (see warm).
func (l *Lease) entry(r *sluice.Request, t sluice.Ticks, cold bool) (*leaseEntry, error) {
	us := r.Now.UnixMicro()
	for {
		l.mu.Lock()
		e := l.keys[keyOf(r)]
		if e == nil && cold && !l.warm(keyOf(r), us) {
			l.mu.Unlock()
			return nil, errCold
		}
		if e == nil && full(len(l.keys), l.opts.MaxKeys) && !l.roomLocked(us) {
			l.mu.Unlock()
			return nil, errFull
		}
		if e == nil || e.dead.Load() || e.alg != r.Algorithm || e.limit != r.Limit {
			// New, or its rule changed: units reserved under the old
			// limit expire with their window.
			e = &leaseEntry{key: keyOf(r), alg: r.Algorithm, limit: r.Limit, ticks: t}
			l.keys[e.key] = e
			l.recent.forget(e.key)
			if len(l.keys) > l.sweep {
				l.sweepLocked(us)
			}
		}
		l.mu.Unlock()
		e.mu.Lock()
		if !e.dead.Load() {
			e.used = max(e.used, us)
			return e, nil
		}
		e.mu.Unlock()
	}
}

// warm reports whether k, a key without an entry, was asked for in the
// current or the previous second of request time (us), and notes that it
// was asked for now. A key asked for once gains nothing from a lease: its
// reservation would cost a round trip, and hold the units it does not
// spend away from the other instances until they expire. So its first
// request in a second or two is decided in the store (Take, exactly), and
// the next makes it an entry. At most MaxKeys keys without an entry are
// noted per second; past them a key stays cold. l.mu is held.
func (l *Lease) warm(k nsKey, us int64) bool {
	if sec := floorDiv(us, 1e6); sec > l.recentAt {
		l.recent.shift(sec - l.recentAt)
		l.recentAt = sec
	}
	return l.recent.seen(k, l.opts.MaxKeys)
}

// roomLocked sweeps the keys for room for a new one at MaxKeys, and reports
// whether there is. A sweep that frees nothing is not tried again for the
// next MaxKeys/16 new keys (decided in the store meanwhile), so that its
// cost, a pass over the keys, stays a few steps per decision. l.mu is held.
func (l *Lease) roomLocked(us int64) bool {
	if l.skip > 0 {
		l.skip--
		return false
	}
	l.sweepLocked(us)
	if full(len(l.keys), l.opts.MaxKeys) {
		l.skip = l.opts.MaxKeys / 16
		return false
	}
	return true
}

// minSweep is the fewest keys a Lease keeps before it sweeps.
const minSweep = 4096

// sweepLocked forgets the keys that hold nothing: no units (or only
// expired ones), no refusal pending, and no decision in the last period.
// Forgetting one only costs a reservation when it comes back. It runs when
// the keys have doubled since the last sweep, so its cost is spread over
// the keys added. l.mu is held.
func (l *Lease) sweepLocked(us int64) {
	for k, e := range l.keys {
		if !e.mu.TryLock() {
			continue
		}
		idle := us-e.used >= e.ticks.Period*e.ticks.Tick && us >= e.denyUntil
		bucket := e.alg == sluice.TokenBucket || e.alg == sluice.GCRA
		if idle && e.expired == 0 && (e.units == 0 || us >= e.until || bucket && e.valid(us) == 0) {
			e.dead.Store(true)
			delete(l.keys, k)
		}
		e.mu.Unlock()
	}
	l.sweep = max(minSweep, 2*len(l.keys))
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
		e.info(r.Now.UnixMicro(), &d)
	}
	l.local.Add(1)
	return d, nil
}

// charge is Take for a report (Request.Force) that the units held do not
// cover: they go back to the store, which then charges the report, debt
// and all; the instance holds nothing for the key until its next
// reservation, which sees the debt. e.mu is held.
func (l *Lease) charge(ctx context.Context, e *leaseEntry, r sluice.Request) (sluice.Decision, error) {
	var ops []redisstore.ReturnOp
	if e.units > 0 {
		ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.units, Window: e.window, Now: r.Now})
	}
	if e.expired > 0 {
		ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.expired, Window: e.expWindow, Now: r.Now})
	}
	if len(ops) > 0 {
		if err := l.inner.Return(ctx, ops); err != nil {
			return sluice.Decision{}, fmt.Errorf("fleet: lease: report %q: %w", r.Key, err)
		}
		for _, op := range ops {
			l.returned.Add(uint64(op.Units))
		}
	}
	e.units, e.expired, e.read, e.denyUntil, e.denyNeed = 0, 0, false, 0, 0
	d, err := l.inner.Take(ctx, r)
	if err != nil {
		return d, fmt.Errorf("fleet: lease: report %q: %w", r.Key, err)
	}
	l.calls.Add(1)
	return d, nil
}

// ensure makes e hold at least need units at r.Now if the store can give
// them, and fills *d with the decision for need (Allowed if held). e.mu is
// held.
func (l *Lease) ensure(ctx context.Context, e *leaseEntry, r *sluice.Request, need int64, d *sluice.Decision) error {
	us := r.Now.UnixMicro()
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
	g, err := l.inner.Lease(ctx, q, back)
	if l.opts.OnLease != nil {
		l.opts.OnLease(want, g.Units, time.Since(start), err)
	}
	if err != nil {
		return fmt.Errorf("fleet: lease: take %q: %w", r.Key, err)
	}
	l.calls.Add(1)
	l.granted.Add(uint64(g.Units))
	l.returned.Add(uint64(e.expired))
	e.expired = 0
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

// retry is how long from us until the store's state at the last grant, with
// the units held given back, can give need units (for a bucket, at least a
// chunk's worth, so that a drained bucket is not asked once per refilled
// token by every instance). e.mu is held.
func (e *leaseEntry) retry(us, need, chunk int64) time.Duration {
	ask := need
	if e.alg == sluice.TokenBucket || e.alg == sluice.GCRA {
		ask = min(e.ticks.Burst, max(need, (e.ticks.Burst+autoShare*4-1)/(autoShare*4), chunk))
	}
	st := e.st
	giveBack(e.alg, &e.ticks, &st, e.units, e.window, e.gnow)
	giveBack(e.alg, &e.ticks, &st, e.expired, e.expWindow, e.gnow)
	var w sluice.Decision
	if _, err := e.alg.TakeMicro(&w, &st, &e.limit, us-e.skew, ask); err != nil || w.Allowed {
		return 0
	}
	return w.RetryAfter
}

// valid is how many units a bucket's lease may still spend at us. The
// store's debt refills from the oldest tokens up, and the units held are
// the newest: they are good while the debt the store had at the last grant,
// refilled until us, still covers them. Past that, spending one would let
// the fleet pass the burst (the store would count it as refilled).
func (e *leaseEntry) valid(us int64) int64 {
	if !e.read {
		return 0
	}
	t := &e.ticks
	st := e.st
	d := debtAt(e.alg, t, &st, floorDiv(us-e.skew, t.Tick))
	return d / t.Period
}

// info sets d's Remaining and ResetAfter at us: what the store's state at
// the last grant, with the units this instance holds given back, has left
// at us (refilled, or in a new window), as if no other instance had taken
// any since. e.mu is held.
func (e *leaseEntry) info(us int64, d *sluice.Decision) {
	d.Remaining, d.ResetAfter = e.units, 0
	if !e.read {
		return
	}
	st := e.st
	giveBack(e.alg, &e.ticks, &st, e.units, e.window, e.gnow)
	giveBack(e.alg, &e.ticks, &st, e.expired, e.expWindow, e.gnow)
	var q sluice.Decision
	if _, err := e.alg.TakeMicro(&q, &st, &e.limit, us-e.skew, 0); err == nil {
		d.Remaining = max(0, q.Remaining)
		d.ResetAfter = q.ResetAfter
	}
}

// fits is whether a request of need units, held, is admitted: always,
// except a query (need 0) while the store's state is in debt after a
// report (Request.Force), which is refused as the store would refuse it,
// with its RetryAfter. e.mu is held.
func (e *leaseEntry) fits(us, need int64, d *sluice.Decision) bool {
	if need > 0 || !e.read {
		return true
	}
	st := e.st
	giveBack(e.alg, &e.ticks, &st, e.units, e.window, e.gnow)
	giveBack(e.alg, &e.ticks, &st, e.expired, e.expWindow, e.gnow)
	var q sluice.Decision
	if _, err := e.alg.TakeMicro(&q, &st, &e.limit, us-e.skew, 0); err != nil || q.Allowed {
		return true
	}
	d.RetryAfter = q.RetryAfter
	return false
}

// Close gives back every unit held and not expired, in one round trip, and
// sends later requests to the shared store.
func (l *Lease) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	now := time.Now()
	us := now.UnixMicro()
	var ops []redisstore.ReturnOp
	l.mu.Lock()
	for _, e := range l.keys {
		e.mu.Lock()
		if e.units > 0 && us < e.until {
			ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.units, Window: e.window, Now: now})
			e.units = 0
		}
		if e.expired > 0 {
			ops = append(ops, redisstore.ReturnOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Units: e.expired, Window: e.expWindow, Now: now})
			e.expired = 0
		}
		e.mu.Unlock()
	}
	l.mu.Unlock()
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
