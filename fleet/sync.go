package fleet

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

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
	// after it and, over a store on its own clock, that clock then
	// (redisstore.Taken.Clock; 0 over a store on the requests' clock).
	SyncTake(ctx context.Context, r sluice.Request) (sluice.Decision, redisstore.Taken, error)
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
// alone stops at the limit). Uneven traffic passes it by less: with
// instance i admitting λᵢ, (n−1)/n · λ becomes λ − Σλᵢ²/λ. For a limit of R per period P under k-fold
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
// # Clocks
//
// Over a store that reads its own clock (redisstore.Options.RedisTime),
// Sync decides on that clock: every decision or read of a key in the store,
// and every batch that sends or reads it, tells the distance from the
// requests' clock to the clock of the key's own master (half a round
// trip's error), and the key's local decisions, and the hits they send,
// are moved by it (see syncEntry.now). A jump of the instance's clock is
// so picked up by the next batch that sends or reads the key: within one
// interval for a key with hits, two for one whose requests are all
// refused. Over a store on the requests' clock, they decide at
// Request.Now.
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
	dels    int           // keys deleted from keys since it was made (see compactKeys)
	touched []*syncEntry  // decided on since the last batch
	batch   chan struct{} // closed when the batch in flight has settled
	// flushing holds a token while a batch is in flight: one at a time
	// (the loop's and Flush's), so that batch is always the one whose
	// keys are in flight. A channel, which a synctest bubble sees block.
	flushing chan struct{}
	// recent is the keys without an entry asked for since the last batch
	// and in the interval before it (see warm); colds are the cold
	// decisions in flight, per key.
	recent recent
	colds  map[nsKey]coldFlight

	// writer and seq number the batches' ops, so that Redis counts an op
	// sent again after a lost reply once (redisstore.SyncOp).
	writer string
	seq    atomic.Uint64

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

// removeMatching deletes from *m, under mu (which guards *m and *dels),
// the keys match selects (it gets each key's Namespace and Key), counting
// them in *dels (see compactKeys), and returns their values: what
// Lease.ForgetAt and Lease.Drop let go.
func removeMatching[V any](mu *sync.Mutex, m *map[nsKey]V, dels *int, match func(namespace, key string) bool) []V {
	mu.Lock()
	defer mu.Unlock()
	var gone []V
	for k, v := range *m {
		if match(k.ns, k.key) {
			gone = append(gone, v)
			delete(*m, k)
			*dels++
		}
	}
	*m = compactKeys(*m, dels)
	return gone
}

func (k nsKey) compare(o nsKey) int {
	if c := strings.Compare(k.ns, o.ns); c != 0 {
		return c
	}
	return strings.Compare(k.key, o.key)
}

// NewSync returns a Sync over inner and starts its batch loop; Close stops it.
func NewSync(inner SyncStore, o SyncOptions) (*Sync, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.MaxKeys = maxKeysOr(o.MaxKeys)
	s := &Sync{inner: inner, opts: o, keys: make(map[nsKey]*syncEntry), stop: make(chan struct{}), done: make(chan struct{}), flushing: make(chan struct{}, 1),
		recent: newRecent(), colds: make(map[nsKey]coldFlight), writer: newWriter()}
	go s.loop()
	return s, nil
}

// newWriter returns a name for a Sync's ops that no other Sync takes.
func newWriter() string {
	var b [12]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
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
	Local       uint64 // decisions made locally (not those of a load, decided in the shared store)
	Overflow    uint64 // decisions made in the shared store: the key was new and MaxKeys were held
	Cold        uint64 // decisions made in the shared store: the key's first in two intervals
	Keys        int    // keys held now
	// Overshoot is how far over its limit the last batch found a key (in
	// requests of cost 1), and MaxOvershoot the most seen: what this
	// instance can observe of the fleet's error. Reports (Request.Force)
	// charged past the limit count in it too.
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

// now is the instant (µs) Sync decides r at locally, r being a request of
// e's key: r.Now on the store's clock, as the key's last call to the store
// measured the distance between the two (see syncEntry.measure), within
// half its round trip: its decision or read in the store before a decision
// (a key's first, or the first after two idle intervals, see acquire), or
// the batch that last sent or read it. Over a store that reads its own
// clock (redisstore.Options.RedisTime, as the daemon runs it), an instance
// whose clock is ahead or behind thus decides, and stamps its hits, as the
// store would: on its own clock it would see refills that have not
// happened (or none that have), and its hits would move the key's state
// ahead of every other instance's. On a Cluster the clock is the key's own
// master's, as exact mode's is. Over a store on the requests' clock the
// distance is 0. e.mu is held.
func (e *syncEntry) now(r *sluice.Request) int64 { return r.Now.UnixMicro() - e.skew }

// check validates what the local path needs: its decisions read r.Now
// even over a store that reads its own clock, so a Now outside
// sluice.MinTime … sluice.MaxTime (the zero time of a Request built
// without it) is refused as the store would refuse it.
func check(r *sluice.Request) (sluice.Ticks, error) {
	if r.Cost < 0 {
		return sluice.Ticks{}, fmt.Errorf("%w: %d is negative", sluice.ErrInvalidCost, r.Cost)
	}
	t, err := r.Limit.Ticks()
	if err != nil {
		return t, err
	}
	if t.Burst != t.Rate && r.Algorithm.Valid() && !r.Algorithm.TakesBurst() {
		return t, r.Algorithm.ValidateLimit(r.Limit) // a window's burst, as the store refuses it
	}
	return t, sluice.CheckTime(r.Now)
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
	e, decided, err := s.acquire(ctx, r, t, first, nil, nil)
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
	if err == errClosed {
		return s.inner.Take(ctx, *r)
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	if !decided {
		err = e.decide(r, e.now(r), &e.view, &d)
	}
	e.mu.Unlock()
	s.touch(e)
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("fleet: sync: take %q: %w", r.Key, err)
	}
	if !decided { // else the store decided, on the entry's first read (a load)
		s.local.Add(1)
	}
	return d, nil
}
