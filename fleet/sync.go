package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// SyncStore is the shared store a Sync decorates; *redisstore.Store is one.
type SyncStore interface {
	sluice.Store
	// Sync adds each op's hits to its key and reads back the key's state,
	// in one round trip for the whole batch.
	Sync(ctx context.Context, ops []redisstore.SyncOp) error
	// SyncTake decides r exactly, as Take, and returns the key's state
	// after it.
	SyncTake(ctx context.Context, r sluice.Request) (sluice.Decision, sluice.State, error)
}

// SyncOptions configure a Sync.
type SyncOptions struct {
	// Interval is how often the instance sends its hits and reads back the
	// global counts: one batch, one round trip, for every key it decided
	// since the last batch. Required.
	Interval time.Duration
	// Applies selects the requests Sync decides; the others go to the
	// shared store unchanged. Nil selects every request whose algorithm
	// can be shared (redisstore.Shareable). It is called on every request
	// of such an algorithm, with a copy of it: a pointer would make every
	// request escape to the heap, as the compiler cannot see where a func
	// value keeps it.
	Applies func(sluice.Request) bool
	// OnBatch, if set, is called after every batch with its number of
	// keys, how long the round trip took, and its error.
	OnBatch func(keys int, took time.Duration, err error)
	// MaxKeys bounds the keys Sync holds (a view and the hits not yet
	// sent, a few hundred bytes each); 0 means DefaultSyncMaxKeys. While
	// it holds that many, a key it does not hold is decided in the shared
	// store, exactly (one round trip, as without Sync), and counted in
	// SyncStats.Overflow, until idle keys age out (two intervals unused).
	// Decisions under way at once may pass it by their number.
	MaxKeys int
}

// Validate reports whether o can be used.
func (o SyncOptions) Validate() error {
	if o.Interval <= 0 {
		return fmt.Errorf("fleet: sync: interval %v must be positive", o.Interval)
	}
	return checkMaxKeys("sync", o.MaxKeys)
}

// Sync is a soft limit: a sluice.Store that decides locally, from its last
// view of every instance's count plus its own hits since, and reconciles
// with the shared store once per Interval in one batch.
//
// # The bound
//
// An instance admits a request while its view is under the limit; its view
// lacks only the other instances' hits that the store has not yet returned
// to it. A hit is sent at most one Interval after it was admitted and read
// back by another instance at most one Interval (plus a round trip) after
// that, so with n instances each admitting at most λ/n requests per second,
// the fleet passes the limit by at most
//
//	overshoot ≤ (n−1)/n · λ · (2·Interval + RTT)
//
// requests (and by at most (n−1) × the limit in any case: each instance
// alone stops at the limit). For a limit of R per period P under k-fold
// overload, λ = k·R/P and the overshoot is a fraction 2k·(n−1)/n ·
// Interval/P of R: 2.2% for n = 3, k = 10, Interval 100ms, P 1 minute. The
// token bucket and GCRA pay an overshoot back: their debt may pass the
// burst, and the fleet then waits for it to refill.
//
// A key's first request in two intervals is decided in the shared store,
// exactly, as plain mode would (one round trip): a key asked for once
// gains nothing from a view. Its next request within two intervals is
// decided in the store too and makes the key an entry, whose view is the
// state after; from then on its requests are decided locally. A key the
// instance has not decided for two intervals is read again before its next
// decision (one round trip), so a view is never older than that; a key
// decided on every interval costs no round trip of its own.
//
// Sync holds at most MaxKeys keys: beyond, a new key is decided in the
// shared store, exactly, until idle keys age out.
//
// # Algorithms
//
// token_bucket, gcra, fixed_window and sliding_window_counter with one
// segment: states that hits counted elsewhere can be added to. Requests of
// other algorithms go to the shared store, exact: the sliding log keeps a
// time per admission, the multi-segment counter a ring of counts, and the
// leaky bucket hands out places in one queue (a Delay), which instances
// cannot assign without asking each other.
//
// # Decisions
//
// Allowed, Remaining and the durations are those of the instance's view. A
// single instance decides exactly as the shared store would: it passes
// sluicetest.
type Sync struct {
	inner SyncStore
	opts  SyncOptions

	mu      sync.Mutex
	keys    map[nsKey]*syncEntry
	touched []*syncEntry  // decided on since the last batch
	batch   chan struct{} // closed when the batch in flight has settled
	// recent is the keys without an entry asked for since the last batch
	// and in the interval before it (see warm); colds are the cold
	// decisions in flight, per key.
	recent recent
	colds  map[nsKey]coldFlight

	closed   atomic.Bool
	closeErr error // the last batch's, set before done is closed
	stop     chan struct{}
	done     chan struct{}

	batches, batchKeys, batchErrs, loads, local, overflow, cold atomic.Uint64
	overshoot, maxOvershoot                                     atomic.Int64
}

var _ sluice.Store = (*Sync)(nil)

// nsKey is a Request's Namespace and Key: a store keeps one state per pair.
type nsKey struct{ ns, key string }

func keyOf(r *sluice.Request) nsKey { return nsKey{r.Namespace, r.Key} }

func (k nsKey) compare(o nsKey) int {
	if c := strings.Compare(k.ns, o.ns); c != 0 {
		return c
	}
	return strings.Compare(k.key, o.key)
}

type syncEntry struct {
	key   nsKey
	alg   sluice.Algorithm
	limit sluice.Limit
	ticks sluice.Ticks

	touched atomic.Bool // in Sync.touched, or about to be
	dead    atomic.Bool // evicted: look the key up again

	mu       sync.Mutex
	view     sluice.State
	hits     []redisstore.Hit // admitted since the last snapshot
	inflight bool             // hits of a batch are on their way
	loading  chan struct{}    // closed when a load ends
	synced   time.Time        // when the view was last read back
	failed   bool             // the last read or batch of the key failed
	last     int64            // µs: the latest request time decided
	colds    chan struct{}    // closed when the key's cold decisions in flight at its creation end
}

// NewSync returns a Sync over inner and starts its batch loop; Close stops it.
func NewSync(inner SyncStore, o SyncOptions) (*Sync, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.MaxKeys = maxKeysOr(o.MaxKeys)
	s := &Sync{inner: inner, opts: o, keys: make(map[nsKey]*syncEntry), stop: make(chan struct{}), done: make(chan struct{}),
		recent: newRecent(), colds: make(map[nsKey]coldFlight)}
	go s.loop()
	return s, nil
}

func (s *Sync) applies(r *sluice.Request) bool {
	if s.closed.Load() || !redisstore.Shareable(r.Algorithm, r.Limit) {
		return false
	}
	return s.opts.Applies == nil || s.opts.Applies(*r)
}

// SyncStats are a Sync's counters since it started.
type SyncStats struct {
	Batches     uint64 // batches sent
	BatchKeys   uint64 // keys in them, summed
	BatchErrors uint64 // batches that failed (their hits are sent again)
	Loads       uint64 // keys read before a decision: asked for again after a cold decision, or idle two intervals
	Local       uint64 // decisions made locally
	Overflow    uint64 // decisions made in the shared store: the key was new and MaxKeys were held
	Cold        uint64 // decisions made in the shared store: the key's first in two intervals
	Keys        int    // keys held now
	// Overshoot is how far over its limit the last batch found a key (in
	// requests of cost 1), and MaxOvershoot the most seen: what this
	// instance can observe of the fleet's error.
	Overshoot, MaxOvershoot int64
}

// Stats returns the counters.
func (s *Sync) Stats() SyncStats {
	s.mu.Lock()
	n := len(s.keys)
	s.mu.Unlock()
	return SyncStats{
		Batches: s.batches.Load(), BatchKeys: s.batchKeys.Load(), BatchErrors: s.batchErrs.Load(),
		Loads: s.loads.Load(), Local: s.local.Load(), Overflow: s.overflow.Load(), Cold: s.cold.Load(), Keys: n,
		Overshoot: s.overshoot.Load(), MaxOvershoot: s.maxOvershoot.Load(),
	}
}

// check validates what the local path needs.
func check(r *sluice.Request) (sluice.Ticks, error) {
	if r.Cost < 0 {
		return sluice.Ticks{}, fmt.Errorf("%w: %d is negative", sluice.ErrInvalidCost, r.Cost)
	}
	return r.Limit.Ticks()
}

// Take decides r locally (see Sync) or, if Sync does not handle it, in the
// shared store.
func (s *Sync) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	return s.take(ctx, &r)
}

// take is Take on a request the caller holds (TakeAll of one request
// passes its own).
func (s *Sync) take(ctx context.Context, r *sluice.Request) (sluice.Decision, error) {
	if !s.applies(r) {
		return s.inner.Take(ctx, *r)
	}
	t, err := check(r)
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("fleet: sync: take %q: %w", r.Key, err)
	}
	var d sluice.Decision
	first := &d
	if r.Force {
		first = nil // the store's first-sight take knows only Take: read, then charge here
	}
	e, decided, err := s.acquire(ctx, r, t, first)
	if err == errCold {
		s.cold.Add(1)
		d, err := s.inner.Take(ctx, *r)
		s.coldDone(keyOf(r))
		return d, err
	}
	if err == errFull {
		s.overflow.Add(1)
		return s.inner.Take(ctx, *r)
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	if !decided {
		err = e.decide(r, &e.view, &d)
	}
	e.mu.Unlock()
	s.touch(e)
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("fleet: sync: take %q: %w", r.Key, err)
	}
	s.local.Add(1)
	return d, nil
}

// step runs r's algorithm on st at r.Now: Take's step, or Charge's for a
// report (Request.Force).
func step(r *sluice.Request, d *sluice.Decision, st *sluice.State) (int64, error) {
	if r.Force {
		return r.Algorithm.ChargeMicro(d, st, &r.Limit, r.Now.UnixMicro(), r.Cost)
	}
	return r.Algorithm.TakeMicro(d, st, &r.Limit, r.Now.UnixMicro(), r.Cost)
}

// decide runs r on st (the view, or a copy of it) and records the hit.
func (e *syncEntry) decide(r *sluice.Request, st *sluice.State, d *sluice.Decision) error {
	us := r.Now.UnixMicro()
	bucket := e.alg == sluice.TokenBucket || e.alg == sluice.GCRA
	var before int64
	if bucket {
		before = debtAt(e.alg, &e.ticks, st, floorDiv(us, e.ticks.Tick))
	}
	if _, err := step(r, d, st); err != nil {
		return err
	}
	d.Remaining = max(0, d.Remaining)
	if (d.Allowed || r.Force) && r.Cost > 0 {
		if bucket {
			// The debt the request added to the view: a report past the
			// state's cap counts as reaching it (see
			// sluice.Algorithm.Charge), and so adds less.
			e.record(redisstore.Hit{At: us, Cost: debtAt(e.alg, &e.ticks, st, floorDiv(us, e.ticks.Tick)) - before})
			return nil
		}
		// Counted in the view's window, which may be ahead of now; adding
		// the hit stops at the cap, as the charge that made it did.
		at := max(us, windowStart(&e.ticks, st))
		e.record(redisstore.Hit{At: at, Cost: min(r.Cost, capCost(e.alg, &e.ticks))})
	}
	return nil
}

// maxHits bounds the hits a bucket keeps per key between batches; past it
// the last two fold into one, exactly (see fold). Window hits merge per
// window, exactly.
const maxHits = 64

// record adds h to the hits the next batch sends.
func (e *syncEntry) record(h redisstore.Hit) {
	if n := len(e.hits); n > 0 {
		last := &e.hits[n-1]
		switch e.alg {
		case sluice.FixedWindow, sluice.SlidingWindowCounter:
			p := e.ticks.Period * e.ticks.Tick
			if floorDiv(last.At, p) == floorDiv(h.At, p) {
				last.Cost = min(last.Cost+h.Cost, capCost(e.alg, &e.ticks))
				return
			}
		default:
			// A bucket's clock only moves forward: a hit stamped before
			// the last one acts at the last one's time (see inOrder).
			h.At = max(h.At, last.At)
		}
	}
	e.hits = append(e.hits, h)
	e.hits = fold(e.alg, &e.ticks, e.hits, maxHits)
}

// inflight returns a channel closed when the batch in flight has settled.
func (s *Sync) inflight() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.batch == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return s.batch
}

// touch puts e in the next batch.
func (s *Sync) touch(e *syncEntry) {
	if e.touched.Swap(true) {
		return
	}
	s.mu.Lock()
	s.touched = append(s.touched, e)
	s.mu.Unlock()
}

// warm reports whether k, a key without an entry, was asked for since the
// batch before last, and notes that it was asked for now. A key asked for
// once gains nothing from a view: reading its state and sending its hit
// later costs two round trips where deciding it in the store, exactly,
// costs one. So its first request in two intervals is decided in the store
// (Take), and the next makes it an entry. At most MaxKeys keys without an
// entry are noted per interval; past them a key stays cold, decided
// exactly. s.mu is held.
func (s *Sync) warm(k nsKey) bool { return s.recent.seen(k, s.opts.MaxKeys) }

// coldFlight is the cold decisions of a key in flight: n of them, and done,
// made only when an entry of the key waits for them, closed when the last
// ends. A map value, so that a cold decision allocates nothing of its own.
type coldFlight struct {
	n    int
	done chan struct{}
}

// coldDone ends a cold decision of k (acquire's errCold), made in the store.
func (s *Sync) coldDone(k nsKey) {
	s.mu.Lock()
	if c, ok := s.colds[k]; ok {
		if c.n--; c.n > 0 {
			s.colds[k] = c
		} else {
			if c.done != nil {
				close(c.done)
			}
			delete(s.colds, k)
		}
	}
	s.mu.Unlock()
}

// acquire returns r's entry, locked, with a view at most two intervals old.
// With d non-nil, a cold key (see warm) is errCold: the caller decides it
// in the store, then calls coldDone. A key this instance has no view of is
// read only once the cold decisions of it in flight have ended, so that
// the view has their hits; with d non-nil, it is decided in the store
// (one round trip, as the first read would be) and true is returned with
// the decision in *d; its view is the state after.
func (s *Sync) acquire(ctx context.Context, r *sluice.Request, t sluice.Ticks, d *sluice.Decision) (*syncEntry, bool, error) {
	// waited is the entry whose read or batch this call waited for: only
	// that entry's view is "refreshed just now". If it was evicted
	// meanwhile, the entry found next is new and must be read.
	var waited *syncEntry
	for {
		s.mu.Lock()
		e := s.keys[keyOf(r)]
		if e == nil && d != nil && !s.warm(keyOf(r)) {
			c := s.colds[keyOf(r)]
			c.n++
			s.colds[keyOf(r)] = c
			s.mu.Unlock()
			return nil, false, errCold
		}
		if e == nil && full(len(s.keys), s.opts.MaxKeys) {
			s.mu.Unlock()
			return nil, false, errFull
		}
		if e == nil || e.dead.Load() || e.alg != r.Algorithm || e.limit != r.Limit {
			// New, or its rule changed: start over from the store. The
			// old entry's hits still go out with the next batch.
			e = &syncEntry{key: keyOf(r), alg: r.Algorithm, limit: r.Limit, ticks: t}
			s.keys[e.key] = e
			if c, ok := s.colds[e.key]; ok {
				// No cold decision of the key starts from now on: the
				// entry's first read waits for those in flight.
				if c.done == nil {
					c.done = make(chan struct{})
					s.colds[e.key] = c
				}
				e.colds = c.done
			}
			s.recent.forget(e.key)
		}
		s.mu.Unlock()
		e.mu.Lock()
		if e.dead.Load() {
			e.mu.Unlock()
			continue
		}
		e.last = max(e.last, r.Now.UnixMicro())
		if !e.synced.IsZero() && time.Since(e.synced) < 2*s.opts.Interval {
			return e, false, nil // fresh
		}
		if waited == e {
			if !e.failed {
				return e, false, nil // refreshed just now
			}
			// The read or batch we waited for failed: the store does not
			// answer.
			e.mu.Unlock()
			return nil, false, fmt.Errorf("fleet: sync: take %q: %w: the shared store did not answer for two intervals", r.Key, sluice.ErrStoreUnavailable)
		}
		// Too old: wait for the read or batch in flight, if any, else read.
		ch := e.loading
		if ch == nil && e.inflight {
			ch = s.inflight()
		}
		if ch != nil {
			waited = e
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, false, fmt.Errorf("fleet: sync: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, ctx.Err())
			}
		}
		ch = make(chan struct{})
		e.loading = ch
		if w := e.colds; w != nil {
			// Read after the cold decisions made before the key had an
			// entry, so that the view has their hits.
			e.mu.Unlock()
			var err error
			select {
			case <-w:
			case <-ctx.Done():
				err = ctx.Err()
			}
			e.mu.Lock()
			if err != nil {
				e.loading = nil
				close(ch)
				e.mu.Unlock()
				return nil, false, fmt.Errorf("fleet: sync: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
			}
			e.colds = nil
		}
		if d != nil && e.synced.IsZero() && len(e.hits) == 0 {
			// A new entry: decide in the store, and start from its state.
			e.mu.Unlock()
			s.loads.Add(1)
			dd, st, err := s.inner.SyncTake(ctx, *r)
			e.mu.Lock()
			e.loading = nil
			close(ch)
			e.failed = err != nil
			if err != nil {
				e.mu.Unlock()
				return nil, false, fmt.Errorf("fleet: sync: take %q: %w", r.Key, err)
			}
			e.view = st
			s.observe(e, &st, false)
			for _, h := range e.hits {
				addHit(e.alg, &e.ticks, &e.view, h)
			}
			e.synced = time.Now()
			dd.Remaining = max(0, dd.Remaining)
			*d = dd
			return e, true, nil
		}
		ops := []redisstore.SyncOp{e.snapshot()}
		e.mu.Unlock()
		s.loads.Add(1)
		err := s.inner.Sync(ctx, ops)
		e.mu.Lock()
		e.loading = nil
		close(ch)
		s.settle(e, &ops[0], time.Now())
		if err != nil {
			e.mu.Unlock()
			return nil, false, fmt.Errorf("fleet: sync: take %q: %w", r.Key, err)
		}
		return e, false, nil
	}
}

// snapshot moves e's hits into a batch op. e.mu is held.
func (e *syncEntry) snapshot() redisstore.SyncOp {
	op := redisstore.SyncOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit, Hits: e.hits}
	e.hits = nil
	e.inflight = true
	return op
}

// settle takes a batch op's reply into e: the view becomes the shared
// state plus the hits admitted since the snapshot. On failure the hits go
// back, to be sent again. e.mu is held.
func (s *Sync) settle(e *syncEntry, op *redisstore.SyncOp, now time.Time) {
	e.inflight = false
	e.failed = op.Err != nil
	if op.Err != nil {
		e.hits = append(op.Hits, e.hits...)
		if e.alg == sluice.TokenBucket || e.alg == sluice.GCRA {
			inOrder(e.hits)
			e.hits = fold(e.alg, &e.ticks, e.hits, maxHits)
		}
		if len(e.hits) > 0 {
			s.touch(e) // send them with the next batch
		}
		return
	}
	e.view = op.State
	for _, h := range e.hits {
		addHit(e.alg, &e.ticks, &e.view, h)
	}
	e.synced = now
	s.observe(e, &op.State, len(op.Hits) > 0)
}

// observe records how far over its limit the store's state st of e is, at
// the time of e's latest decision (the clock its windows are counted on).
func (s *Sync) observe(e *syncEntry, st *sluice.State, sent bool) {
	if o := overshoot(e.alg, &e.ticks, st, e.last); o > 0 || sent {
		s.overshoot.Store(o)
		for m := s.maxOvershoot.Load(); o > m && !s.maxOvershoot.CompareAndSwap(m, o); m = s.maxOvershoot.Load() {
		}
	}
}
