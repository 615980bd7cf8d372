package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// How Sync finds a key's entry and keeps its view fresh: acquire, the cold
// decisions of keys without an entry (decided in the shared store) and
// the wait for those in flight, and settle, which takes a read's or a
// batch's reply into the view.

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

// errRetry is acquire's answer when it let the caller's entries go (see
// acquire): the caller starts over.
var errRetry = errors.New("fleet: sync: retry")

// acquire returns r's entry, locked, with a view at most two intervals old;
// errClosed once Close has run (the caller decides in the store).
// With d non-nil, a cold key (see warm) is errCold: the caller decides it
// in the store, then calls coldDone. A key this instance has no view of is
// read only once the cold decisions of it in flight have ended, so that
// the view has their hits; with d non-nil, it is decided in the store
// (one round trip, as the first read would be) and true is returned with
// the decision in *d; its view is the state after. A caller holding other
// entries passes release, which unlocks them: if the view must wait for
// the batch in flight, which settles them too, acquire calls it before
// waiting and then returns errRetry with the entry it waited for
// (unlocked); the caller passes it back as retried when it starts over, so
// that if that batch failed, acquire fails as it does when it waited
// itself, without one more round trip to a store that just did not answer.
func (s *Sync) acquire(ctx context.Context, r *sluice.Request, t sluice.Ticks, d *sluice.Decision, release func(), retried *syncEntry) (*syncEntry, bool, error) {
	// waited is the entry whose read or batch this call waited for: only
	// that entry's view is "refreshed just now". If it was evicted
	// meanwhile, the entry found next is new and must be read.
	var waited *syncEntry
	for {
		e, err := s.entry(r, t, d)
		if err != nil {
			return nil, false, err
		}
		e.mu.Lock()
		if e.dead.Load() {
			e.mu.Unlock()
			continue
		}
		if s.closed.Load() {
			// Closed since the caller's applies: under the key's lock,
			// no hit is recorded and no read starts once Close's last
			// batch may have looked at the key (see Sync.last).
			e.mu.Unlock()
			return nil, false, errClosed
		}
		if ok, err := s.current(e, r, waited, retried); ok || err != nil {
			if err != nil {
				return nil, false, err
			}
			return e, false, nil
		}
		// Too old: wait for the read or batch in flight, if any, else read.
		if ok, err := s.awaitInflight(ctx, e, r, release); ok {
			waited = e
			if err == errRetry {
				return e, false, errRetry
			}
			if err != nil {
				return nil, false, err
			}
			continue
		}
		decided, again, err := s.load(ctx, e, r, d)
		if err != nil {
			return nil, false, err
		}
		if again {
			continue
		}
		return e, decided, nil
	}
}

// entry returns r's entry, unlocked. It makes a new one when r's key has
// none, or one let go, or one of another rule (see newEntry). With d
// non-nil, a key without a live entry that is cold (see warm) is errCold,
// its cold decision counted in flight; a new key past MaxKeys is errFull.
func (s *Sync) entry(r *sluice.Request, t sluice.Ticks, d *sluice.Decision) (*syncEntry, error) {
	s.mu.Lock()
	e := s.keys[keyOf(r)]
	if (e == nil || e.dead.Load()) && d != nil && !s.warm(keyOf(r)) {
		c := s.colds[keyOf(r)]
		c.n++
		s.colds[keyOf(r)] = c
		s.mu.Unlock()
		return nil, errCold
	}
	if e == nil && full(len(s.keys), s.opts.MaxKeys) {
		s.mu.Unlock()
		return nil, errFull
	}
	var old *syncEntry
	if e == nil || e.dead.Load() || e.alg != r.Algorithm || e.limit != r.Limit {
		old = e
		e = s.newEntry(r, t, old)
	}
	s.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		s.hush(old)
		old.mu.Unlock()
		e.before() // let go of those quiet already: a key whose rule flips keeps no chain
	}
	return e, nil
}

// newEntry makes and files r's entry in place of old (nil if none), which is
// let go: r's key is new, or its rule changed, and starts over from the
// store. The old entry takes no more hits; those it has still go out with
// the next batch, before the new entry's (see before). The new entry's
// first read waits for the cold decisions of its key in flight, and none
// starts from now on. s.mu is held.
func (s *Sync) newEntry(r *sluice.Request, t sluice.Ticks, old *syncEntry) *syncEntry {
	if old != nil {
		old.dead.Store(true)
	}
	e := &syncEntry{key: keyOf(r), alg: r.Algorithm, limit: r.Limit, ticks: t}
	e.prev.Store(old)
	s.keys[e.key] = e
	if c, ok := s.colds[e.key]; ok {
		if c.done == nil {
			c.done = make(chan struct{})
			s.colds[e.key] = c
		}
		e.colds = c.done
	}
	s.recent.forget(e.key)
	return e
}

// current notes r's offset from the wall clock in e, and reports whether
// e's view serves r as it is: fresh (synced within two intervals), or
// refreshed just now by the read or batch this acquire waited for (waited,
// or retried by the caller after errRetry). If that read or batch failed,
// it returns an error, e unlocked: the store does not answer. e.mu is
// held, and stays held unless it returns an error.
func (s *Sync) current(e *syncEntry, r *sluice.Request, waited, retried *syncEntry) (bool, error) {
	wall := time.Now()
	e.reqOff = r.Now.UnixMicro() - wall.UnixMicro()
	if !e.synced.IsZero() {
		e.last = max(e.last, e.now(r)) // else its first read measures the distance: see load
		if wall.Sub(e.synced) < 2*s.opts.Interval {
			return true, nil // fresh
		}
	}
	if waited == e || retried == e && e.failed {
		if !e.failed {
			return true, nil // refreshed just now
		}
		// The read or batch we waited for failed: the store does not
		// answer.
		e.mu.Unlock()
		return false, fmt.Errorf("fleet: sync: take %q: %w: the shared store did not answer for two intervals", r.Key, sluice.ErrStoreUnavailable)
	}
	return false, nil
}

// awaitInflight waits, e unlocked, for e's read or the batch in flight
// holding e's hits, if either is, and reports true when it waited: the
// caller looks at e again, unless the error is errRetry or ctx's. If it
// waits for a batch and release is non-nil, it calls release first and
// returns errRetry (see acquire). It returns false, e still locked, when
// nothing is in flight. e.mu is held.
func (s *Sync) awaitInflight(ctx context.Context, e *syncEntry, r *sluice.Request, release func()) (bool, error) {
	ch := e.loading
	batch := ch == nil && e.inflight
	if batch {
		ch = s.inflight()
	}
	if ch == nil {
		return false, nil
	}
	e.mu.Unlock()
	retry := batch && release != nil
	if retry {
		release()
	}
	select {
	case <-ch:
		if retry {
			return true, errRetry
		}
		return true, nil
	case <-ctx.Done():
		return true, fmt.Errorf("fleet: sync: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, ctx.Err())
	}
}

// load refreshes e's view from the store, e.loading telling others a read
// is in flight: after the cold decisions of e's key in flight (see
// awaitColds), with d non-nil and e new, by deciding r in the store (see
// takeFirst: it reports decided); otherwise by reading e, its unsent hits
// with it (see read). again tells the caller to look for r's entry anew. On
// success without again, e.mu is held; else it is not. e.mu is held.
func (s *Sync) load(ctx context.Context, e *syncEntry, r *sluice.Request, d *sluice.Decision) (decided, again bool, err error) {
	ch := make(chan struct{})
	e.loading = ch
	if e.colds != nil {
		if err := s.awaitColds(ctx, e, ch, r); err != nil {
			return false, false, err
		}
	}
	if d != nil && e.synced.IsZero() && !e.unsent() {
		return true, false, s.takeFirst(ctx, e, ch, r, d)
	}
	again, err = s.read(ctx, e, ch, r)
	return false, again, err
}

// awaitColds waits, e unlocked, for the cold decisions of e's key made
// before it had an entry, so that its first read has their hits. If ctx
// ends first, it ends e's load (ch, see load) and returns an error, e
// unlocked. e.mu is held, and stays held unless it returns an error.
func (s *Sync) awaitColds(ctx context.Context, e *syncEntry, ch chan struct{}, r *sluice.Request) error {
	w := e.colds
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
		return fmt.Errorf("fleet: sync: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	e.colds = nil
	return nil
}

// takeFirst decides r, the first request of the new entry e, in the store
// (one round trip, as its first read would be), e unlocked meanwhile, and
// starts e's view from the state after it, with the distance to the
// store's clock measured; the decision goes in *d. It ends e's load (ch,
// see load). e.mu is held, and stays held unless it returns an error.
func (s *Sync) takeFirst(ctx context.Context, e *syncEntry, ch chan struct{}, r *sluice.Request, d *sluice.Decision) error {
	e.mu.Unlock()
	s.loads.Add(1)
	start := time.Now()
	dd, tk, err := s.inner.SyncTake(ctx, *r)
	mid := start.Add(time.Since(start) / 2)
	e.mu.Lock()
	e.loading = nil
	close(ch)
	e.failed = err != nil
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("fleet: sync: take %q: %w", r.Key, err)
	}
	e.measure(mid, tk.Clock)
	e.last = max(e.last, e.now(r))
	e.view = tk.State
	s.observe(e, &tk.State, false)
	for _, h := range e.hits {
		addHit(e.alg, &e.ticks, &e.view, h)
	}
	e.synced = time.Now()
	dd.Remaining = max(0, dd.Remaining)
	*d = dd
	return nil
}

// read sends e's unsent hits and reads its state back, e unlocked
// meanwhile, and settles the reply into e (see settle); it ends e's load
// (ch, see load). again is true, e unlocked, when e was let go or Sync
// closed during the read: e takes no hit, and the caller looks anew. e.mu
// is held, and stays held unless it returns an error or again.
func (s *Sync) read(ctx context.Context, e *syncEntry, ch chan struct{}, r *sluice.Request) (again bool, err error) {
	ops := s.snapshot(e, nil)
	e.mu.Unlock()
	s.loads.Add(1)
	start := time.Now()
	err = s.inner.Sync(ctx, ops)
	mid := start.Add(time.Since(start) / 2)
	e.mu.Lock()
	e.loading = nil
	close(ch)
	s.settle(e, ops, mid, time.Now())
	e.last = max(e.last, e.now(r))
	if err != nil {
		e.mu.Unlock()
		return false, fmt.Errorf("fleet: sync: take %q: %w", r.Key, err)
	}
	if e.dead.Load() || s.closed.Load() { // let go, or closed, while it was read: it takes no hit
		e.mu.Unlock()
		return true, nil
	}
	return false, nil
}

// settle takes the replies to e's ops of a batch into e, sent at mid
// (halfway through the round trip) and read back at now: the view becomes
// the shared state after them plus the hits admitted since the snapshot,
// and the distance to the store's clock is measured again (see measure).
// If one failed, each op may have counted its hits or not (a reply lost
// after Redis ran it): those with hits are kept, to be sent again as they
// are, numbered, so that Redis counts each once. e.mu is held.
func (s *Sync) settle(e *syncEntry, ops []redisstore.SyncOp, mid, now time.Time) {
	e.inflight = false
	e.failed = false
	for i := range ops {
		e.failed = e.failed || ops[i].Err != nil
	}
	if e.failed {
		e.doubts = e.doubts[:0]
		for _, op := range ops {
			if len(op.Hits) > 0 {
				op.Err = nil
				e.doubts = append(e.doubts, op)
			}
		}
		if e.unsent() {
			s.touch(e) // send them with the next batch
		}
		s.hush(e)
		return
	}
	e.doubts = nil
	if len(e.hits) > 0 {
		s.touch(e) // hits that waited for the ops in doubt, or for the entry before (see before)
	}
	s.hush(e)
	op := &ops[len(ops)-1]
	e.measure(mid, op.Clock)
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
