package fleet

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"sync"

	"github.com/sluicehq/sluice"
)

// Where a Fallback's refund goes. A refund gives back units, not a
// request's, so the Fallback keeps, per key, the units memory counted in
// the latest outage and not yet given back (the ledger): a refund gives
// those back to memory first, which counted them, and only the rest to
// the shared store, which counted that rest if anyone did. In local mode
// the rest cannot reach the store and is dropped (RefundsDropped): given
// to memory, it would raise the key's local share by units the store
// still counts. After the outage, the units counted in memory go back to
// memory, never to the store, which did not count them.
//
// The ledger holds a key until memory's state of it is at rest (the
// ResetAfter of its latest count: memory has nothing left to give back
// then), or until the next outage starts: memory's counts from an earlier
// outage still count against the key's share, but a refund in this one is
// for a request of this outage or for one the store counted.

// ledgerShards splits the ledger's lock.
const ledgerShards = 16

// ledgerSweepMin is the least size past which a shard sweeps itself as
// keys arrive.
const ledgerSweepMin = 64

type ledger struct {
	seed   maphash.Seed
	per    int // keys at most per shard: beyond, a key's units are not noted (see add)
	shards [ledgerShards]ledgerShard
}

type ledgerShard struct {
	mu   sync.Mutex
	m    map[nsKey]ledgerEntry
	next int // the size at which add sweeps the shard
	// A full shard sweeps itself as a key arrives once an eighth of its
	// keys are at rest (at wake, µs), or once a new outage began since
	// (epoch): not at every key, which would cost the whole shard each.
	wake  int64
	epoch uint64
}

// ledgerEntry is a key's units counted in memory in outage epoch and not
// given back, until memory's state of the key is at rest (µs, on the
// requests' clock).
type ledgerEntry struct {
	units, until int64
	epoch        uint64
}

func newLedger(maxKeys int) *ledger {
	l := &ledger{seed: maphash.MakeSeed(), per: maxKeys/ledgerShards + 1}
	for i := range l.shards {
		l.shards[i].m = make(map[nsKey]ledgerEntry)
		l.shards[i].next = ledgerSweepMin
	}
	return l
}

func (l *ledger) shard(k nsKey) *ledgerShard {
	return &l.shards[maphash.String(l.seed, k.key)%ledgerShards]
}

// add notes units counted in memory for k at now (µs) in outage epoch,
// memory's state of k being at rest at until, and idle more units when
// memory holds none of this outage's counts of k (none are noted, or
// they are at rest: see counted). Past the bound of keys (the memory
// store's), a key's units are not noted: a refund of them in local mode
// is dropped, and after the outage goes to the store. A full shard sweeps
// itself as keys arrive (see wake).
func (l *ledger) add(k nsKey, units, idle, now, until int64, epoch uint64) {
	sh := l.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[k]
	if ok && e.epoch == epoch && e.until > now {
		e.units = min(e.units, math.MaxInt64-units) + units
		e.until = max(e.until, until)
		sh.m[k] = e
		return
	}
	units = min(units, math.MaxInt64-idle) + idle
	if !ok && len(sh.m) >= sh.next {
		sh.sweep(now, epoch)
		sh.next = max(ledgerSweepMin, 2*len(sh.m))
	}
	if !ok && len(sh.m) >= l.per && (now >= sh.wake || epoch != sh.epoch) {
		sh.sweep(now, epoch)
		sh.plan(l.per, epoch)
	}
	if !ok && len(sh.m) >= l.per {
		return
	}
	sh.m[k] = ledgerEntry{units: units, until: until, epoch: epoch}
}

// take removes up to units of k's noted in outage epoch and returns how
// many: those memory counted and still holds at now (µs).
func (l *ledger) take(k nsKey, units, now int64, epoch uint64) int64 {
	sh := l.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[k]
	if !ok {
		return 0
	}
	if e.epoch != epoch || e.until <= now {
		delete(sh.m, k)
		return 0
	}
	n := min(units, e.units)
	if e.units -= n; e.units == 0 {
		delete(sh.m, k)
	} else {
		sh.m[k] = e
	}
	return n
}

// forget removes k (its memory state was reset).
func (l *ledger) forget(k nsKey) {
	sh := l.shard(k)
	sh.mu.Lock()
	delete(sh.m, k)
	sh.mu.Unlock()
}

// sweep removes every key of another outage than epoch or at rest at now
// (µs) and returns how many.
func (l *ledger) sweep(now int64, epoch uint64) int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += sh.sweep(now, epoch)
		sh.mu.Unlock()
	}
	return n
}

// plan sets when a full shard (of at most per keys) sweeps itself next:
// once an eighth of per of its keys are at rest, as the keys' notes say
// now (a later count may put one's rest off: the sweep then finds fewer),
// or at another outage than epoch. sh.mu is held.
func (sh *ledgerShard) plan(per int, epoch uint64) {
	sh.epoch = epoch
	k := max(1, per/8)
	if len(sh.m) < k {
		sh.wake = math.MinInt64 // not full: the next key to find it full sweeps
		return
	}
	untils := make([]int64, 0, len(sh.m))
	for _, e := range sh.m {
		untils = append(untils, e.until)
	}
	slices.Sort(untils)
	sh.wake = untils[k-1]
}

// sweep is ledger.sweep for one shard; sh.mu is held. The map is made
// anew when it lost most of its keys, handing its room back.
func (sh *ledgerShard) sweep(now int64, epoch uint64) int {
	n := len(sh.m)
	for k, e := range sh.m {
		if e.epoch != epoch || e.until <= now {
			delete(sh.m, k)
		}
	}
	if len(sh.m) < (n-len(sh.m))/4 {
		m := make(map[nsKey]ledgerEntry, len(sh.m))
		for k, e := range sh.m {
			m[k] = e
		}
		sh.m = m
	}
	return n - len(sh.m)
}

// counted notes what a decision in memory counted: r, a request at the
// local share, decided d. A request counts when admitted, a report
// (Force) always. A report past a leaky bucket's queue joins it its cost
// in spacings after max(now, the last leave) (see sluice.Algorithm.Charge):
// on a queue that had emptied, one spacing more than its cost, which a
// refund gives back as any other unit. So the ledger notes that unit more
// where it holds none of the key's units of this outage (memory's queue
// emptied, as far as they tell). Where it holds some, the report adds its
// cost alone: the queue had not emptied (or its last unit left within a
// spacing of now), or it had because of units the ledger still holds,
// which a refund gives back in the unit's place. Behind counts the ledger
// does not hold (an earlier outage's), the unit is noted all the same: a
// refund then gives memory one of those.
func (f *Fallback) counted(r *sluice.Request, d *sluice.Decision) {
	if r.Cost <= 0 || !d.Allowed && !r.Force {
		return
	}
	var idle int64
	if r.Force && !d.Allowed && r.Algorithm == sluice.LeakyBucket {
		idle = 1
	}
	now := r.Now.UnixMicro()
	f.ledger.add(keyOf(r), r.Cost, idle, now, now+max(0, d.ResetAfter.Microseconds()), f.epoch())
}

// mine removes from the ledger and returns the units of a refund r that
// memory counted, up to r.Cost (0 for an invalid refund: the store
// refuses it).
func (f *Fallback) mine(r *sluice.Request) int64 {
	if r.Cost <= 0 || !r.Algorithm.Valid() {
		return 0
	}
	if _, err := check(r); err != nil {
		return 0
	}
	return f.ledger.take(keyOf(r), r.Cost, r.Now.UnixMicro(), f.epoch())
}

// Refund gives r.Cost units back to r's key (sluice.Refunder) where they
// were counted: those memory counted for the key in the latest outage
// (local mode), up to what memory still holds of them, go back to memory;
// the rest to the shared store. In local mode the shared store cannot
// take them: they are dropped (RefundsDropped counts them), not given to
// memory, whose share they would raise while the store still counts
// them. A refund gives back units, not a request's: in local mode, the
// units of a key that memory counted in this outage are given back first,
// whichever request the refund is for.
//
// In store mode the Decision is the shared store's after the refund (asked
// at cost 0 when memory took it all); a refund it cannot make returns its
// error, and the Fallback moves to local mode as for a Take (the units
// memory took stay given back). In local mode the Decision is memory's,
// at the local share. In store mode over a store without Refund, the
// error wraps errors.ErrUnsupported.
func (f *Fallback) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	local := r
	local.Limit = localShare(r.Algorithm, r.Limit, int(f.n))
	if f.Mode() == ModeStore {
		rf, err := refunderOf(f.primary, "fallback", &r)
		if err != nil {
			return sluice.Decision{}, err
		}
		if mine := f.mine(&r); mine > 0 {
			local.Cost = mine
			if _, err := f.local.Refund(ctx, local); err != nil {
				return sluice.Decision{}, err
			}
			r.Cost -= mine
		}
		d, err := rf.Refund(ctx, r)
		if err != nil {
			f.failed(ctx, err)
		}
		return d, err
	}
	mine := f.mine(&r)
	if r.Cost > 0 {
		local.Cost = mine
	}
	d, err := f.local.Refund(ctx, local)
	if err != nil {
		return d, err
	}
	if r.Cost > mine {
		f.dropped.Add(uint64(r.Cost - mine))
	}
	return d, nil
}
