package fleet

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A Sync's entry for a key, and what a local decision does to it: decide
// runs the request on the view and records the hit, which touch puts in
// the next batch and snapshot hands to it.

type syncEntry struct {
	key   nsKey
	alg   sluice.Algorithm
	limit sluice.Limit
	ticks sluice.Ticks

	touched atomic.Bool // in Sync.touched, or about to be
	// dead: let go (evicted, forgotten, its rule changed), it takes no
	// more hits: look the key up again. Set before any check of quiet.
	dead atomic.Bool
	// quiet: dead, and nothing of its own left to send (no hits, no op in
	// doubt or in flight). Once set, it stays.
	quiet atomic.Bool
	// prev is the key's entry this one took over from, until that one and
	// those it took over from are quiet (see before).
	prev atomic.Pointer[syncEntry]

	mu   sync.Mutex
	view sluice.State
	hits []redisstore.Hit // admitted since the last snapshot
	// held: a bucket's units in hits (its hits are debt, net of the
	// refill): those a refund can take back without the store (see
	// Sync.refundLocal).
	held int64
	// doubts are the ops of batches that failed with hits: each may have
	// counted its hits or not. They are sent again, as they are (same
	// Seq), before the key's newer hits, until a reply says they counted
	// once; at most maxDoubts, past which new hits wait in hits.
	doubts   []redisstore.SyncOp
	inflight bool          // hits of a batch are on their way
	loading  chan struct{} // closed when a load ends
	synced   time.Time     // when the view was last read back
	failed   bool          // the last read or batch of the key failed
	last     int64         // µs: the latest request time decided
	colds    chan struct{} // closed when the key's cold decisions in flight at its creation end
	// skew is the requests' clock minus the store's (µs), as the key's
	// last call to the store measured it (see now and measure); reqOff
	// the requests' clock minus this machine's at the key's latest
	// decision (see measure).
	skew, reqOff int64
}

// measure takes the distance between the requests' clock and the store's
// from a call for e's key that read the store's clock (µs; 0: the store
// runs on the requests' clocks, or the call failed) and was halfway
// through, as far as its round trip tells, at mid on this machine's
// clock: the requests' clock then was mid plus their distance to this
// machine's at the key's latest decision. A batch, which no request makes,
// measures so too: a jump of this machine's clock shows at the first
// batch after it, one of the requests' clock at the first after a request
// on it. e.mu is held.
func (e *syncEntry) measure(mid time.Time, clock int64) {
	if clock != 0 {
		e.skew = mid.UnixMicro() + e.reqOff - clock
	}
}

// step runs r's algorithm on st at us (r's instant on the store's clock,
// see Sync.now): Take's step, or Charge's for a report (Request.Force).
func step(r *sluice.Request, us int64, d *sluice.Decision, st *sluice.State) (int64, error) {
	if r.Force {
		return r.Algorithm.ChargeMicro(d, st, &r.Limit, us, r.Cost)
	}
	return r.Algorithm.TakeMicro(d, st, &r.Limit, us, r.Cost)
}

// decide runs r on st (the view, or a copy of it) at us (see step) and
// records the hit.
func (e *syncEntry) decide(r *sluice.Request, us int64, st *sluice.State, d *sluice.Decision) error {
	bucket := e.alg == sluice.TokenBucket || e.alg == sluice.GCRA
	var before int64
	if bucket {
		before = debtAt(e.alg, &e.ticks, st, floorDiv(us, e.ticks.Tick))
	}
	if _, err := step(r, us, d, st); err != nil {
		return err
	}
	d.Remaining = max(0, d.Remaining)
	if (d.Allowed || r.Force) && r.Cost > 0 {
		if bucket {
			// The debt the request added to the view: a report past the
			// state's cap counts as reaching it (see
			// sluice.Algorithm.Charge), and so adds less.
			e.record(redisstore.Hit{At: us, Cost: debtAt(e.alg, &e.ticks, st, floorDiv(us, e.ticks.Tick)) - before})
			e.held = min(e.held+r.Cost, capCost(e.alg, &e.ticks))
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
// window, and only the last window's (the counter's last two) are kept,
// exactly (see record).
const maxHits = 64

// record adds h to the hits the next batch sends.
func (e *syncEntry) record(h redisstore.Hit) {
	if n := len(e.hits); n > 0 {
		last := &e.hits[n-1]
		switch e.alg {
		case sluice.FixedWindow, sluice.SlidingWindowCounter:
			p := e.ticks.Period * e.ticks.Tick
			w := floorDiv(h.At, p)
			if floorDiv(last.At, p) == w {
				last.Cost = min(last.Cost+h.Cost, capCost(e.alg, &e.ticks))
				return
			}
			// A hit of a window before the last one (the counter's last
			// two) changes nothing the batch leaves: the store's state
			// moves on to the newer window, which starts empty (the
			// counter keeps the one before as its previous count), and
			// a state already past it ignores it. Kept, a key decided in
			// every window between two batches kept one hit a window.
			keep := int64(0)
			if e.alg == sluice.SlidingWindowCounter {
				keep = 1
			}
			i := 0
			for i < n && floorDiv(e.hits[i].At, p) < w-keep {
				i++
			}
			e.hits = append(e.hits[:0], e.hits[i:]...)
		default:
			// A bucket's clock only moves forward: a hit stamped before
			// the last one acts at the last one's time (see inOrder).
			h.At = max(h.At, last.At)
		}
	}
	e.hits = append(e.hits, h)
	e.hits = fold(e.alg, &e.ticks, e.hits, maxHits)
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

// maxDoubts bounds the ops in doubt a key keeps while batches fail.
const maxDoubts = 4

// snapshot appends e's ops for a batch to ops: its ops in doubt, then its
// hits (if any, and fewer than maxDoubts are in doubt) moved into an op
// numbered for Redis to count them once (see redisstore.SyncOp); or, with
// neither, a read. e.mu is held.
func (s *Sync) snapshot(e *syncEntry, ops []redisstore.SyncOp) []redisstore.SyncOp {
	e.inflight = true
	ops = append(ops, e.doubts...)
	if len(e.doubts) > 0 && (len(e.hits) == 0 || len(e.doubts) >= maxDoubts) {
		return ops
	}
	op := redisstore.SyncOp{Namespace: e.key.ns, Key: e.key.key, Algorithm: e.alg, Limit: e.limit}
	if len(e.hits) > 0 && e.before() == nil {
		op.Hits, op.Writer, op.Seq = e.hits, s.writer, s.seq.Add(1)
		e.hits, e.held = nil, 0
	}
	return append(ops, op)
}

// unsent reports whether e has hits Redis may not have counted. e.mu is
// held.
func (e *syncEntry) unsent() bool { return len(e.hits) > 0 || len(e.doubts) > 0 }

// before returns the first of the entries e took over from (see prev)
// that is not quiet, or nil. Until it is nil, e numbers none of its hits
// (a batch reads e only): a key's entries share the Sync's writer, and
// Redis skips an op numbered below one it added for the writer, so an op
// of the entry before, in doubt or not yet numbered, must reach Redis
// before any of e's.
func (e *syncEntry) before() *syncEntry {
	p := e.prev.Load()
	q := p
	for q != nil && q.quiet.Load() {
		q = q.prev.Load()
	}
	if q != p {
		e.prev.CompareAndSwap(p, q)
	}
	return q
}

// hush marks e quiet if it is dead and has nothing left to send, and
// then lets its place in s.keys go (see drop). e.mu is held: a decision
// that took e before it died has recorded its hit.
func (s *Sync) hush(e *syncEntry) {
	if e.dead.Load() && !e.quiet.Load() && !e.unsent() && !e.inflight {
		e.quiet.Store(true)
		s.mu.Lock()
		s.drop(e)
		s.mu.Unlock()
	}
}

// drop lets e's place in s.keys go, if it still holds it: to the first of
// e and the entries it took over from that is not quiet (whose hits the
// key's next entry must wait for, see before), or to none. s.mu is held.
func (s *Sync) drop(e *syncEntry) {
	if s.keys[e.key] != e {
		return
	}
	p := e
	if e.quiet.Load() {
		p = e.before()
	}
	if p == nil {
		delete(s.keys, e.key)
		s.dels++
	} else {
		s.keys[e.key] = p
	}
}
