package fleet

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice"
)

// The keys a Lease holds: finding or making a key's entry, the cold keys
// (decided in the shared store), and the sweep that lets idle keys go.

// entry returns r's entry, locked; errFull if r's key is new and MaxKeys
// keys are held; with cold, errCold if r's key is cold (see warm);
// errClosed if CloseAt ran meanwhile.
func (l *Lease) entry(r *sluice.Request, t sluice.Ticks, cold bool) (*leaseEntry, error) {
	us := r.Now.UnixMicro()
	for {
		l.mu.Lock()
		e := l.keys[keyOf(r)]
		if e == nil && cold && !l.warm(keyOf(r), us) {
			l.mu.Unlock()
			return nil, errCold
		}
		if e == nil && full(len(l.keys), l.opts.MaxKeys) && !l.roomLocked(r.Now) {
			l.mu.Unlock()
			return nil, errFull
		}
		if e == nil || e.dead.Load() || e.alg != r.Algorithm || e.limit != r.Limit {
			// New, or its rule changed: units reserved under the old
			// limit expire with their window. Used now, so that a sweep
			// before its caller locks it does not find it idle.
			e = &leaseEntry{key: keyOf(r), alg: r.Algorithm, limit: r.Limit, ticks: t, used: us}
			l.keys[e.key] = e
			l.recent.forget(e.key)
			if len(l.keys) > l.sweep {
				l.sweepLocked(r.Now)
			}
		}
		l.mu.Unlock()
		e.mu.Lock()
		if l.closed.Load() {
			// Closed since the caller's applies: CloseAt has given back
			// the key's units or waits for this lock to, and nothing
			// would give back units reserved now.
			e.mu.Unlock()
			return nil, errClosed
		}
		if !e.dead.Load() {
			e.used = max(e.used, e.clock(r.Now))
			return e, nil
		}
		e.mu.Unlock()
	}
}

// errClosed is Lease.entry's answer once the Lease is closed, and
// Sync.acquire's once the Sync is: the caller decides in the shared store,
// as after CloseAt or Close.
var errClosed = errors.New("fleet: closed")

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
// whether there is. After a sweep that frees fewer than MaxKeys/16 keys,
// the next MaxKeys/16 new keys that find no room are decided in the store
// without one, so that its cost, a pass over the keys, stays about 16
// steps per new key: keys going idle one at a time, as under steady wide
// traffic, would otherwise cost a pass per new key, under l.mu. l.mu is
// held.
func (l *Lease) roomLocked(now time.Time) bool {
	if l.skip > 0 {
		l.skip--
		return false
	}
	held := len(l.keys)
	l.sweepLocked(now)
	if held-len(l.keys) < max(1, l.opts.MaxKeys/16) {
		l.skip = l.opts.MaxKeys / 16
	}
	return !full(len(l.keys), l.opts.MaxKeys)
}

// minSweep is the fewest keys a Lease keeps before it sweeps.
const minSweep = 4096

// sweepLocked forgets the keys that hold nothing: no units (or only
// expired ones), no refusal pending, and no decision in the last period.
// Forgetting one only costs a reservation when it comes back. It runs when
// the keys have doubled since the last sweep, so its cost is spread over
// the keys added. Each entry sees now on its own clock (see
// leaseEntry.clock). l.mu is held.
func (l *Lease) sweepLocked(now time.Time) {
	l.swept += len(l.keys)
	for k, e := range l.keys {
		if !e.mu.TryLock() {
			continue
		}
		us := e.clock(now)
		idle := us-e.used >= e.ticks.Period*e.ticks.Tick && us >= e.denyUntil
		bucket := e.alg == sluice.TokenBucket || e.alg == sluice.GCRA
		if idle && e.expired == 0 && (e.units == 0 || us >= e.until || bucket && e.valid(us) == 0) {
			e.dead.Store(true)
			delete(l.keys, k)
			l.dels++
		}
		e.mu.Unlock()
	}
	l.keys = compactKeys(l.keys, &l.dels)
	l.sweep = max(minSweep, 2*len(l.keys))
}

// compactKeys returns m, or a copy of it once *dels, the keys deleted from
// it since it was made, reach the keys it holds (and minSweep): a Go map
// whose keys come and go grows its tables (the deleted keys' slots are not
// all reused), so a decorator holding at most MaxKeys keys took ever more
// memory under wide traffic. A copy costs a step per key held, once per as
// many deletes.
func compactKeys[V any](m map[nsKey]V, dels *int) map[nsKey]V {
	if *dels < max(minSweep, len(m)) {
		return m
	}
	c := make(map[nsKey]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	*dels = 0
	return c
}
