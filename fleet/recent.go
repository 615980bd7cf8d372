package fleet

import "errors"

// errCold is the answer of Sync.acquire and Lease.entry for a key asked for
// the first time in a while (see Sync.warm and Lease.warm): the caller
// decides it in the shared store, exactly.
var errCold = errors.New("fleet: cold key")

// recent is the keys without an entry that a decorator was asked for in
// the current period and in the one before: a key in neither is cold.
type recent struct{ cur, prev map[nsKey]struct{} }

func newRecent() recent {
	return recent{cur: make(map[nsKey]struct{}), prev: make(map[nsKey]struct{})}
}

// shift starts the period n periods after the current one (n < 1: none).
func (r *recent) shift(n int64) {
	switch {
	case n == 1:
		r.cur, r.prev = r.prev, r.cur
	case n > 1:
		clear(r.prev)
	default:
		return
	}
	clear(r.cur)
}

// seen reports whether k was asked for in the current or the previous
// period, and notes that it was asked for now, if fewer than max keys are
// noted in the current one.
func (r *recent) seen(k nsKey, max int) bool {
	if _, ok := r.cur[k]; ok {
		return true
	}
	_, ok := r.prev[k]
	if len(r.cur) < max {
		r.cur[k] = struct{}{}
	}
	return ok
}

// forget drops k: it has an entry now.
func (r *recent) forget(k nsKey) {
	delete(r.cur, k)
	delete(r.prev, k)
}
