package daemon

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/redisstore"
)

// fleetStore is the daemon's store over Redis: it sends each request of a
// rule with `sync` to the fleet.Sync of that interval, each request of a
// rule with `lease` to the fleet.Lease of that chunk, and the others to
// Redis, exact. Rules find their mode by the head of their store keys
// ("NAME|FINGERPRINT|"); the fingerprint changes with the limit, so a rule
// whose limit changes on reload starts on fresh keys and fresh local state,
// and the old keys' state simply ages out (a lease of a window expires with
// it, a bucket's lapses as it refills). The decorators live as long as the
// daemon: a reload keeps their local state, and Close hands it back (sync:
// hits not yet sent; lease: units held).
type fleetStore struct {
	redis fleetShared
	now   func() time.Time // the decisions' clock, for Close

	modes atomic.Pointer[map[string]ruleMode] // by key head

	mu      sync.Mutex
	syncs   map[time.Duration]*fleet.Sync
	leases  map[int]*fleet.Lease // by chunk; 0 is auto
	current map[string]string    // rule name → its key head in the last config
	batch   *prometheus.HistogramVec
	grants  *prometheus.HistogramVec
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
func (l *lazyRedis) SyncTake(ctx context.Context, r sluice.Request) (sluice.Decision, sluice.State, error) {
	s := l.s.Load()
	if s == nil {
		return sluice.Decision{}, sluice.State{}, errNotConnected
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
	head  string
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
// requests' Now (nil means time.Now), which Close gives leases back at.
func newFleetStore(r fleetShared, reg prometheus.Registerer, now func() time.Time) *fleetStore {
	if now == nil {
		now = time.Now
	}
	f := &fleetStore{redis: r, now: now, syncs: map[time.Duration]*fleet.Sync{}, leases: map[int]*fleet.Lease{}}
	f.modes.Store(&map[string]ruleMode{})
	f.batch = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_fleet_sync_batch_seconds",
		Help:    "Round trip of one sync batch (every key an instance decided during an interval), by interval.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"interval"})
	f.grants = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_fleet_lease_reserve_seconds",
		Help:    "Round trip of one lease reservation, by chunk (auto or N).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"chunk"})
	if reg != nil {
		reg.MustRegister(f.batch, f.grants, fleetCollector{f})
	}
	return f
}

// configure sets the modes of set's rules, creating the decorators they
// need. The rules of earlier configs keep theirs (their keys differ, or
// their mode is replaced), so the generation in force until the new one is
// swapped in decides as before. It fails only if a decorator cannot be
// built.
func (f *fleetStore) configure(set *rules.Set, descs *descriptors.Set) error {
	modes := map[string]ruleMode{}
	for k, m := range *f.modes.Load() {
		modes[k] = m
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	current := map[string]string{}
	add := func(name, head string, sync time.Duration, lease rules.AutoCount) error {
		m := ruleMode{rule: name, sync: sync, lease: lease, store: f.redis}
		switch {
		case sync > 0:
			s := f.syncs[sync]
			if s == nil {
				hist := f.batch.WithLabelValues(sync.String())
				var err error
				s, err = fleet.NewSync(f.redis, fleet.SyncOptions{Interval: sync, Applies: func(r sluice.Request) bool { return f.owns(s, r.Key) },
					OnBatch: func(_ int, took time.Duration, _ error) { hist.Observe(took.Seconds()) }})
				if err != nil {
					return err
				}
				f.syncs[sync] = s
			}
			m.store = s
		case !lease.IsZero():
			chunk := lease.N
			if lease.Auto {
				chunk = 0
			}
			l := f.leases[chunk]
			if l == nil {
				hist := f.grants.WithLabelValues(lease.String())
				var err error
				l, err = fleet.NewLease(f.redis, fleet.LeaseOptions{Chunk: int64(chunk), Applies: func(r sluice.Request) bool { return f.owns(l, r.Key) },
					OnLease: func(_, _ int64, took time.Duration, _ error) { hist.Observe(took.Seconds()) }})
				if err != nil {
					return err
				}
				f.leases[chunk] = l
			}
			m.store = l
		}
		m.head = head
		modes[m.head] = m
		current[name] = m.head
		return nil
	}
	for _, r := range set.Rules {
		if err := add(r.Name, r.StoreKey(""), r.Sync, r.Lease); err != nil {
			return err
		}
	}
	// The Envoy descriptors' keys have the same shape ("envoy:ID|FP|").
	var err error
	descs.Each(func(r *descriptors.Rule) {
		if err == nil && !r.Unlimited && r.RequestsPerUnit > 0 {
			err = add(r.FullName(), r.Head(), r.Sync, r.Lease)
		}
	})
	if err != nil {
		return err
	}
	f.modes.Store(&modes)
	f.current = current
	return nil
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

// route returns the store deciding key's requests.
func (f *fleetStore) route(key string) sluice.Store {
	if m, ok := (*f.modes.Load())[head(key)]; ok {
		return m.store
	}
	return f.redis
}

// owns tells decorator d whether a request is its own: its rule's mode is
// d's. A request d gets through route always is, unless its rule changed
// mode since; in a TakeAll spanning modes, d gets them all and sends the
// others (the exact ones) to Redis itself. d is set once NewSync or
// NewLease returns, before any rule uses it.
func (f *fleetStore) owns(d sluice.Store, key string) bool {
	m, ok := (*f.modes.Load())[head(key)]
	return ok && d != nil && m.store == d
}

// Take implements sluice.Store.
func (f *fleetStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	return f.route(r.Key).Take(ctx, r)
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
	if len(rs) == 1 {
		return f.route(rs[0].Key).TakeAll(ctx, rs, ds)
	}
	var stores []sluice.Store
	var groups [][]int
	for i := range rs {
		s := f.route(rs[i].Key)
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

// Close hands back the local state (sync: hits not sent; lease: units
// held and still good on the decisions' clock); the shared store stays
// open.
func (f *fleetStore) Close() error {
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

// fleetCollector exports the decorators' counters and each rule's mode.
type fleetCollector struct{ f *fleetStore }

var (
	descSyncBatches   = prometheus.NewDesc("sluice_fleet_sync_batches_total", "Sync batches sent to Redis, by interval.", []string{"interval"}, nil)
	descSyncKeys      = prometheus.NewDesc("sluice_fleet_sync_batch_keys_total", "Keys in the sync batches, summed, by interval (divide by the batches for the mean batch size).", []string{"interval"}, nil)
	descSyncErrors    = prometheus.NewDesc("sluice_fleet_sync_batch_errors_total", "Sync batches that failed (their hits go out with the next one), by interval.", []string{"interval"}, nil)
	descSyncLoads     = prometheus.NewDesc("sluice_fleet_sync_loads_total", "Keys read from Redis before a decision (asked for again after a cold decision, or idle for two intervals), by interval.", []string{"interval"}, nil)
	descSyncLocal     = prometheus.NewDesc("sluice_fleet_sync_decisions_total", "Decisions made locally by sync rules, by interval.", []string{"interval"}, nil)
	descSyncOverflow  = prometheus.NewDesc("sluice_fleet_sync_overflow_total", "Decisions of sync rules made exactly in Redis because the instance held its most keys (fleet.DefaultSyncMaxKeys) and the key was new, by interval.", []string{"interval"}, nil)
	descSyncCold      = prometheus.NewDesc("sluice_fleet_sync_cold_total", "Decisions of sync rules made exactly in Redis because the key was asked for the first time in two intervals (a key asked for once gains nothing from a local view), by interval.", []string{"interval"}, nil)
	descSyncOvershoot = prometheus.NewDesc("sluice_fleet_sync_overshoot_max", "The most requests a sync batch found a key admitted beyond its limit, by interval: the fleet's error as this instance can see it.", []string{"interval"}, nil)
	descLeaseCalls    = prometheus.NewDesc("sluice_fleet_lease_reservations_total", "Lease reservations asked of Redis, by chunk.", []string{"chunk"}, nil)
	descLeaseGranted  = prometheus.NewDesc("sluice_fleet_lease_units_granted_total", "Units of quota reserved, by chunk.", []string{"chunk"}, nil)
	descLeaseReturned = prometheus.NewDesc("sluice_fleet_lease_units_returned_total", "Units of quota given back (expired, or at shutdown), by chunk.", []string{"chunk"}, nil)
	descLeaseSpent    = prometheus.NewDesc("sluice_fleet_lease_units_spent_total", "Units of quota spent on admitted requests, by chunk.", []string{"chunk"}, nil)
	descLeaseOverflow = prometheus.NewDesc("sluice_fleet_lease_overflow_total", "Decisions of lease rules made exactly in Redis because the instance held its most keys (fleet.DefaultLeaseMaxKeys), none could be let go, and the key was new, by chunk.", []string{"chunk"}, nil)
	descLeaseCold     = prometheus.NewDesc("sluice_fleet_lease_cold_total", "Decisions of lease rules made exactly in Redis because the key was asked for the first time in a second or two (a lease for a key asked for once would hold quota it does not spend), by chunk.", []string{"chunk"}, nil)
	descRuleMode      = prometheus.NewDesc("sluice_rule_fleet_mode", "How each rule counts across the fleet: 1 for its mode (exact, sync or lease).", []string{"rule", "mode"}, nil)
)

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSyncBatches, descSyncKeys, descSyncErrors, descSyncLoads, descSyncLocal, descSyncOverflow, descSyncCold, descSyncOvershoot,
		descLeaseCalls, descLeaseGranted, descLeaseReturned, descLeaseSpent, descLeaseOverflow, descLeaseCold, descRuleMode} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	for iv, s := range f.syncs {
		st, l := s.Stats(), iv.String()
		counter(descSyncBatches, st.Batches, l)
		counter(descSyncKeys, st.BatchKeys, l)
		counter(descSyncErrors, st.BatchErrors, l)
		counter(descSyncLoads, st.Loads, l)
		counter(descSyncLocal, st.Local, l)
		counter(descSyncOverflow, st.Overflow, l)
		counter(descSyncCold, st.Cold, l)
		ch <- prometheus.MustNewConstMetric(descSyncOvershoot, prometheus.GaugeValue, float64(st.MaxOvershoot), l)
	}
	for chunk, s := range f.leases {
		st, l := s.Stats(), "auto"
		if chunk > 0 {
			l = strconv.Itoa(chunk)
		}
		counter(descLeaseCalls, st.Calls, l)
		counter(descLeaseGranted, st.Granted, l)
		counter(descLeaseReturned, st.Returned, l)
		counter(descLeaseSpent, st.Spent, l)
		counter(descLeaseOverflow, st.Overflow, l)
		counter(descLeaseCold, st.Cold, l)
	}
	seen := map[string]bool{}
	for _, m := range *f.modes.Load() {
		if !seen[m.rule] && f.current[m.rule] == m.head {
			seen[m.rule] = true
			ch <- prometheus.MustNewConstMetric(descRuleMode, prometheus.GaugeValue, 1, m.rule, m.name())
		}
	}
}
