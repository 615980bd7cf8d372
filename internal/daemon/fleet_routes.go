package daemon

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/rules"
)

// How a config's rules reach their decorators, and how a reload retires
// what the config it replaces used: prepare builds the routes of a config
// (and the decorators it lacks), use puts them in force and retires.
//
// Retiring waits for the decisions still routed by the old routes, each
// counted in them from enter to leave: a decision that took a decorator
// from them may still be writing into it (a sync hit recorded after the
// last batch would be lost; a lease reserved after its units were given
// back would be held until it expires). A count is exact where a grace
// period is a guess about how long a decision can take (a slow Redis, a
// read waiting for a batch); it costs a decision two atomic adds, on one
// of several counters so that cores do not contend for one. The wait is
// as long as the longest decision in flight, bounded by the Redis
// timeout; reloads are serial (Daemon.reloadMu), so at most one routes is
// being retired, and the decisions still running by it end before the
// next reload starts.

// routes is one config's routing: each rule's mode by its key head.
type routes struct {
	modes map[string]ruleMode
	// refs counts the decisions routed by these routes that have not
	// ended, each in a shard picked at random, on cache lines of their
	// own: one counter written by every decision would bounce between
	// the cores of a large machine.
	refs [refShards]refShard
	// retiring is set once the routes are out of force and their
	// decisions are waited for; a decision then says on left that it
	// left.
	retiring atomic.Bool
	left     chan struct{}
}

// refShards is the number of shards of routes.refs.
const refShards = 16

type refShard struct {
	n atomic.Int64
	_ [56]byte // the rest of its cache line
}

func newRoutes(modes map[string]ruleMode) *routes {
	if modes == nil {
		modes = map[string]ruleMode{}
	}
	return &routes{modes: modes, left: make(chan struct{}, 1)}
}

// route returns the store deciding key's requests: its rule's decorator,
// or exact, the shared store.
func (rt *routes) route(key string, exact sluice.Store) sluice.Store {
	if m, ok := rt.modes[head(key)]; ok {
		return m.store
	}
	return exact
}

// enter returns the routes in force, with the caller's decision counted in
// them until it calls leave with the shard returned. A decision that
// counted itself in routes just replaced does not use them: waiting for
// their decisions may have begun.
func (f *fleetStore) enter() (*routes, *refShard) {
	for {
		rt := f.routes.Load()
		sh := &rt.refs[rand.Uint32()%refShards]
		sh.n.Add(1)
		if f.routes.Load() == rt {
			return rt, sh
		}
		rt.leave(sh)
	}
}

// leave ends a decision counted by enter in shard sh.
func (rt *routes) leave(sh *refShard) {
	sh.n.Add(-1)
	if rt.retiring.Load() {
		select {
		case rt.left <- struct{}{}:
		default: // the waiter has yet to look
		}
	}
}

// wait returns once every decision routed by rt, no longer in force, has
// ended. No decision enters rt any more, so once a pass over the shards
// finds none, none that was under way before the pass still is (each is
// counted in one shard from enter to leave).
func (rt *routes) wait() {
	rt.retiring.Store(true)
	for {
		var n int64
		for i := range rt.refs {
			n += rt.refs[i].n.Load()
		}
		if n == 0 {
			return
		}
		<-rt.left
	}
}

// owns tells decorator d whether a request is its own: its rule's mode is
// d's in the routes in force. A request d gets through route always is,
// unless its rule changed mode since (it then goes to Redis, exact); in a
// TakeAll spanning modes, d gets them all and sends the others (the exact
// ones) to Redis itself. d is set once NewSync or NewLease returns, before
// any rule uses it.
//
// A decision routed by the routes before those in force may still find
// its key d's here, if the reload kept the rule as it was: d then keeps
// the key, and retiring those routes has nothing to take from it.
func (f *fleetStore) owns(d sluice.Store, key string) bool {
	m, ok := f.routes.Load().modes[head(key)]
	return ok && d != nil && m.store == d
}

// prepare returns the routes of set's rules and descs' descriptors,
// creating the decorators they need that the routes in force do not
// have. It fails only if a decorator cannot be built; those it built are
// then closed.
func (f *fleetStore) prepare(set *rules.Set, descs *descriptors.Set) (*routes, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	modes := map[string]ruleMode{}
	add := func(name, head string, sync time.Duration, lease rules.AutoCount) error {
		m := ruleMode{rule: name, sync: sync, lease: lease, store: f.redis}
		switch {
		case sync > 0:
			s := f.syncs[sync]
			if s == nil {
				took, size := f.batch.WithLabelValues(sync.String()), f.size.WithLabelValues(sync.String())
				var err error
				every := sync
				if f.syncLoop != nil {
					every = f.syncLoop(sync)
				}
				s, err = fleet.NewSync(f.redis, fleet.SyncOptions{Interval: every, Applies: func(r sluice.Request) bool { return f.owns(s, r.Key) },
					OnBatch: func(keys int, d time.Duration, _ error) {
						took.Observe(d.Seconds())
						size.Observe(float64(keys))
					}})
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
				hist := f.grants.WithLabelValues(chunkLabel(chunk))
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
		modes[head] = m
		return nil
	}
	var err error
	for _, r := range set.Rules {
		if err = add(r.Name, r.StoreKey(""), r.Sync, r.Lease); err != nil {
			break
		}
	}
	// The Envoy descriptors' keys have the same shape ("envoy:ID|FP|").
	descs.Each(func(r *descriptors.Rule) {
		if err == nil && !r.Unlimited && r.RequestsPerUnit > 0 {
			err = add(r.FullName(), r.Head(), r.Sync, r.Lease)
		}
	})
	if err != nil {
		f.discardLocked()
		return nil, err
	}
	return newRoutes(modes), nil
}

// discard closes the decorators prepare built for routes that are not put
// in force after all (a reload refused once they were prepared).
func (f *fleetStore) discard() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.discardLocked()
}

// discardLocked is discard with f.mu held: the decorators the routes in
// force do not use were built by prepare since, and have nothing to hand
// back, nothing counted.
//
// The series prepare made for an interval or chunk that no routes in force
// ever used go with them: /metrics shows no trace of a refused config. One
// that was in force keeps its series, as counters do.
func (f *fleetStore) discardLocked() {
	closeSyncs, closeLeases := f.unusedLocked(f.routes.Load())
	now := f.now()
	for s, iv := range closeSyncs {
		s.Close()
		if !f.syncShownLocked(iv) {
			f.batch.DeleteLabelValues(iv.String())
			f.size.DeleteLabelValues(iv.String())
		}
	}
	for l, chunk := range closeLeases {
		l.CloseAt(now)
		if !f.leaseShownLocked(chunk) {
			f.grants.DeleteLabelValues(chunkLabel(chunk))
		}
	}
}

// syncShownLocked reports whether a Sync of interval iv was ever in force:
// one is being retired, or was.
func (f *fleetStore) syncShownLocked(iv time.Duration) bool {
	if _, done := f.doneSyncs[iv]; done {
		return true
	}
	for _, c := range f.closingSyncs {
		if c == iv {
			return true
		}
	}
	return false
}

// leaseShownLocked is syncShownLocked for a Lease of chunk.
func (f *fleetStore) leaseShownLocked(chunk int) bool {
	if _, done := f.doneLeases[chunk]; done {
		return true
	}
	for _, c := range f.closingLeases {
		if c == chunk {
			return true
		}
	}
	return false
}

// use puts next in force and retires what the routes it replaces used and
// next does not, once every decision routed by them has ended: it closes
// the decorators next does not use (their last sync batch sent, their
// leases given back on the decisions' clock), and makes those it keeps let
// go of the keys of rules that changed or left, handing back the same.
// The rules next keeps as they were keep their keys' local state. It
// returns the errors of handing back; next is in force whatever they are.
func (f *fleetStore) use(next *routes) error {
	old := f.routes.Swap(next)
	old.wait()
	return f.retire(old, next)
}

// retire is use's work once old is idle.
func (f *fleetStore) retire(old, next *routes) error {
	f.mu.Lock()
	closeSyncs, closeLeases := f.unusedLocked(next)
	// Scraped while they close, then summed into their interval's and
	// chunk's counters, last batch and give-back included.
	for s, iv := range closeSyncs {
		f.closingSyncs[s] = iv
	}
	for l, chunk := range closeLeases {
		f.closingLeases[l] = chunk
	}
	// The keys of the decorators kept that old sent them and next does
	// not, by decorator: the heads of their rules.
	forget := map[sluice.Store]map[string]bool{}
	for h, m := range old.modes {
		if m.store == sluice.Store(f.redis) || !next.uses(m.store) {
			continue
		}
		if n, ok := next.modes[h]; ok && n.store == m.store {
			continue
		}
		if forget[m.store] == nil {
			forget[m.store] = map[string]bool{}
		}
		forget[m.store][h] = true
	}
	f.mu.Unlock()
	now := f.now()
	var errs []error
	for s, iv := range closeSyncs {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
			if errors.Is(err, sluice.ErrStoreUnavailable) {
				f.resendLater(s, iv) // done once its hits are sent
				delete(closeSyncs, s)
			}
		}
	}
	for l := range closeLeases {
		errs = append(errs, l.CloseAt(now))
	}
	f.mu.Lock()
	for s, iv := range closeSyncs {
		f.syncDone(s, iv)
	}
	for l, chunk := range closeLeases {
		f.doneLeases[chunk] = addLeaseStats(f.doneLeases[chunk], l.Stats())
		delete(f.closingLeases, l)
	}
	f.mu.Unlock()
	for d, heads := range forget {
		match := func(_, key string) bool { return heads[head(key)] }
		switch d := d.(type) {
		case *fleet.Sync:
			errs = append(errs, d.Forget(match))
		case *fleet.Lease:
			errs = append(errs, d.ForgetAt(now, match))
		}
	}
	return errors.Join(errs...)
}

// unusedLocked takes the decorators rt does not use out of the fleet
// store and returns them, with their interval or chunk. Their metrics
// stay (see fleetStore.doneSyncs). f.mu is held.
func (f *fleetStore) unusedLocked(rt *routes) (map[*fleet.Sync]time.Duration, map[*fleet.Lease]int) {
	syncs := map[*fleet.Sync]time.Duration{}
	leases := map[*fleet.Lease]int{}
	for iv, s := range f.syncs {
		if !rt.uses(s) {
			syncs[s] = iv
			delete(f.syncs, iv)
		}
	}
	for chunk, l := range f.leases {
		if !rt.uses(l) {
			leases[l] = chunk
			delete(f.leases, chunk)
		}
	}
	return syncs, leases
}

// uses reports whether a rule of rt goes to store d.
func (rt *routes) uses(d sluice.Store) bool {
	for _, m := range rt.modes {
		if m.store == d {
			return true
		}
	}
	return false
}

// chunkLabel is the chunk label of a Lease's metrics: auto (0) or N.
func chunkLabel(chunk int) string {
	if chunk == 0 {
		return "auto"
	}
	return strconv.Itoa(chunk)
}
