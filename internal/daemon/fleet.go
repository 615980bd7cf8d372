package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/redisstore"
)

// fleetStore is the daemon's store over Redis: it sends each request of a
// rule with `sync` to the fleet.Sync of that interval, each request of a
// rule with `lease` to the fleet.Lease of that chunk, and the others to
// Redis, exact. Rules find their mode by the head of their store keys
// ("NAME|FINGERPRINT|"); the fingerprint changes with the limit, so a rule
// whose limit changes on reload starts on fresh keys and fresh local state.
// A reload keeps the decorators of the intervals and chunks still in use,
// with their local state; once the decisions still routed by the old
// config have ended, it closes the others and makes those it keeps let go
// of the keys of rules changed or removed, handing back what they held
// (sync: hits not yet sent; lease: units held). See routes. Close hands
// back the rest at shutdown.
type fleetStore struct {
	redis fleetShared
	now   func() time.Time // the decisions' clock, for handing leases back

	routes atomic.Pointer[routes] // in force

	// syncLoop is Options.syncLoop: nil, a Sync runs on its rule's interval.
	syncLoop func(time.Duration) time.Duration

	mu     sync.Mutex // the decorators, their metrics and their retirement
	syncs  map[time.Duration]*fleet.Sync
	leases map[int]*fleet.Lease     // by chunk; 0 is auto
	batch  *prometheus.HistogramVec // round trip
	size   *prometheus.HistogramVec // keys
	grants *prometheus.HistogramVec
	// The counters of the decorators a reload retired: those being closed
	// (their last batch, their give-back), then those closed, summed by
	// interval and chunk. A retired decorator's counts stay in its
	// series, last batch and units given back included, and an interval
	// or chunk that comes back goes on from them: a series that vanished
	// or fell would read as a reset.
	closingSyncs map[*fleet.Sync]time.Duration
	// resending: the Syncs a reload closed while Redis did not answer,
	// sending their hits until it does (see resendLater); stop ends
	// them, at Close.
	resending     sync.WaitGroup
	stop          chan struct{}
	closingLeases map[*fleet.Lease]int
	doneSyncs     map[time.Duration]fleet.SyncStats
	doneLeases    map[int]fleet.LeaseStats
}

// fleetShared is the shared store the decorators reserve from and sync
// with: the Redis store (lazyRedis, until it connects, fails every call).
type fleetShared interface {
	fleet.SyncStore
	fleet.LeaseStore
}

var _ fleetShared = (*lazyRedis)(nil)

// Sync implements fleet.SyncStore.
func (l *lazyRedis) Sync(ctx context.Context, ops []redisstore.SyncOp) error {
	s := l.s.Load()
	if s == nil {
		for i := range ops {
			ops[i].Err = errNotConnected
		}
		return errNotConnected
	}
	return s.Sync(ctx, ops)
}

// SyncTake implements fleet.SyncStore.
func (l *lazyRedis) SyncTake(ctx context.Context, r sluice.Request) (sluice.Decision, redisstore.Taken, error) {
	s := l.s.Load()
	if s == nil {
		return sluice.Decision{}, redisstore.Taken{}, errNotConnected
	}
	return s.SyncTake(ctx, r)
}

// Lease implements fleet.LeaseStore.
func (l *lazyRedis) Lease(ctx context.Context, r sluice.Request, back redisstore.ReturnOp) (redisstore.Grant, error) {
	s := l.s.Load()
	if s == nil {
		return redisstore.Grant{}, errNotConnected
	}
	return s.Lease(ctx, r, back)
}

// Return implements fleet.LeaseStore.
func (l *lazyRedis) Return(ctx context.Context, ops []redisstore.ReturnOp) error {
	s := l.s.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Return(ctx, ops)
}

// ruleMode is how one rule counts.
type ruleMode struct {
	rule  string
	sync  time.Duration
	lease rules.AutoCount
	store sluice.Store
}

func (m ruleMode) name() string {
	switch {
	case m.sync > 0:
		return "sync"
	case !m.lease.IsZero():
		return "lease"
	}
	return "exact"
}

var _ sluice.Store = (*fleetStore)(nil)

// newFleetStore returns the fleet store over r; now is the clock of the
// requests' Now (nil means time.Now), which leases are given back at.
func newFleetStore(r fleetShared, reg prometheus.Registerer, now func() time.Time) *fleetStore {
	if now == nil {
		now = time.Now
	}
	f := &fleetStore{redis: r, now: now, syncs: map[time.Duration]*fleet.Sync{}, leases: map[int]*fleet.Lease{},
		closingSyncs: map[*fleet.Sync]time.Duration{}, closingLeases: map[*fleet.Lease]int{}, stop: make(chan struct{}),
		doneSyncs: map[time.Duration]fleet.SyncStats{}, doneLeases: map[int]fleet.LeaseStats{}}
	f.routes.Store(newRoutes(nil))
	f.batch = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_fleet_sync_batch_seconds",
		Help:    "Round trip of one sync batch (every key an instance decided during an interval), by interval.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"interval"})
	f.size = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_fleet_sync_batch_size",
		Help:    "Keys in one sync batch (every key an instance decided during an interval), by interval.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1 … 262,144 (fleet.DefaultSyncMaxKeys is 100,000)
	}, []string{"interval"})
	f.grants = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_fleet_lease_reserve_seconds",
		Help:    "Round trip of one lease reservation, by chunk (auto or N).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"chunk"})
	if reg != nil {
		reg.MustRegister(f.batch, f.size, f.grants, fleetCollector{f})
	}
	return f
}

// head returns the "NAME|FINGERPRINT|" of a store key, or "".
func head(key string) string {
	i := strings.IndexByte(key, '|')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '|')
	if j < 0 {
		return ""
	}
	return key[:i+1+j+1]
}

// Take implements sluice.Store.
func (f *fleetStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	rt, sh := f.enter()
	defer rt.leave(sh)
	return rt.route(r.Key, f.redis).Take(ctx, r)
}

// Refund gives units back (sluice.Refunder) through the store of r's
// rule's mode: Redis, or the rule's sync or lease decorator.
func (f *fleetStore) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	rt, sh := f.enter()
	defer rt.leave(sh)
	rf, ok := rt.route(r.Key, f.redis).(sluice.Refunder)
	if !ok {
		return sluice.Decision{}, fmt.Errorf("daemon: refund %q: %w", r.Key, errors.ErrUnsupported)
	}
	return rf.Refund(ctx, r)
}

// TakeAll implements sluice.Store. Requests of one mode are decided by one
// TakeAll of that mode's store. Requests of one fleet decorator (sync or
// lease) and exact ones go together to the decorator's TakeAll: it holds
// its keys, decides its own requests, asks Redis about the exact ones in
// the same call (without counting them when its own are denied), and
// counts its own only when Redis admitted: all or nothing, exactly. When
// they span two decorators (sync and lease, or two intervals), each is
// first asked without counting (cost 0: its Remaining tells whether the
// cost fits), then the exact ones are taken in Redis, then the local
// ones: a request denied anywhere consumes nothing, except when another
// decision of this instance takes the local quota between the check and
// the take, which then denies after the others counted.
func (f *fleetStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(rs) {
		return errors.New("daemon: take all: decisions and requests differ in number")
	}
	rt, sh := f.enter()
	defer rt.leave(sh)
	if len(rs) == 1 {
		return rt.route(rs[0].Key, f.redis).TakeAll(ctx, rs, ds)
	}
	var stores []sluice.Store
	var groups [][]int
	for i := range rs {
		s := rt.route(rs[i].Key, f.redis)
		g := -1
		for k, t := range stores {
			if t == s {
				g = k
			}
		}
		if g < 0 {
			g = len(stores)
			stores = append(stores, s)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	switch {
	case len(stores) == 0:
		return nil
	case len(stores) == 1:
		return stores[0].TakeAll(ctx, rs, ds)
	case len(stores) == 2 && (stores[0] == sluice.Store(f.redis) || stores[1] == sluice.Store(f.redis)):
		local := stores[0]
		if local == sluice.Store(f.redis) {
			local = stores[1]
		}
		return local.TakeAll(ctx, rs, ds)
	}
	return f.takeSpanning(ctx, rs, ds, stores, groups)
}

// takeSpanning is TakeAll for requests of two or more fleet decorators.
func (f *fleetStore) takeSpanning(ctx context.Context, rs []sluice.Request, ds []sluice.Decision, stores []sluice.Store, groups [][]int) error {
	run := func(g int, query bool) (bool, error) {
		grs := make([]sluice.Request, len(groups[g]))
		gds := make([]sluice.Decision, len(groups[g]))
		for j, i := range groups[g] {
			grs[j] = rs[i]
			if query {
				grs[j].Cost = 0
			}
		}
		if err := stores[g].TakeAll(ctx, grs, gds); err != nil {
			return false, err
		}
		ok := true
		for j, i := range groups[g] {
			ds[i] = gds[j]
			if query {
				ok = ok && gds[j].Remaining >= rs[i].Cost
				ds[i].Allowed = gds[j].Remaining >= rs[i].Cost
			} else {
				ok = ok && gds[j].Allowed
			}
		}
		return ok, nil
	}
	exact := -1
	ok := true
	for g, s := range stores {
		if s == sluice.Store(f.redis) {
			exact = g
			continue
		}
		fits, err := run(g, true)
		if err != nil {
			return err
		}
		ok = ok && fits
	}
	if exact >= 0 {
		if !ok {
			_, err := run(exact, true)
			return err
		}
		fits, err := run(exact, false)
		if err != nil || !fits {
			return err
		}
	}
	if !ok {
		return nil
	}
	for g := range stores {
		if g == exact {
			continue
		}
		if _, err := run(g, false); err != nil {
			return err
		}
	}
	return nil
}

// Lost makes the fleet decorators let go of what they read from Redis,
// which restarted or failed over (its run_id changed): what they hold was
// counted on a state that is gone. The leases drop their keys and units
// without handing them back (fleet.Lease.Drop); the syncs send the hits
// not yet sent and let their keys go (fleet.Sync.Forget), so that no view
// of the old state, good for two intervals, refuses what Redis admits.
func (f *fleetStore) Lost() error {
	f.mu.Lock()
	leases := make([]*fleet.Lease, 0, len(f.leases))
	for _, l := range f.leases {
		leases = append(leases, l)
	}
	syncs := make([]*fleet.Sync, 0, len(f.syncs))
	for _, s := range f.syncs {
		syncs = append(syncs, s)
	}
	f.mu.Unlock()
	for _, l := range leases {
		l.Drop()
	}
	var errs []error
	for _, s := range syncs {
		errs = append(errs, s.Forget(func(string, string) bool { return true }))
	}
	return errors.Join(errs...)
}

// ForgetKey tells the leases that units of key in namespace ns were given
// back in Redis elsewhere (fleet.Lease.ForgetKey): one refusing the key
// on its own asks Redis again.
func (f *fleetStore) ForgetKey(ns, key string) {
	f.mu.Lock()
	for _, l := range f.leases {
		l.ForgetKey(ns, key)
	}
	f.mu.Unlock()
}

// Close hands back the local state (sync: hits not sent; lease: units
// held and still good on the decisions' clock); the shared store stays
// open. Call it after the last decision.
func (f *fleetStore) Close() error {
	close(f.stop)
	f.resending.Wait()
	f.mu.Lock()
	var errs []error
	for _, s := range f.syncs {
		errs = append(errs, s.Close())
	}
	now := f.now()
	for _, l := range f.leases {
		errs = append(errs, l.CloseAt(now))
	}
	f.mu.Unlock()
	return errors.Join(errs...)
}
