package server

import (
	"sync"
	"sync/atomic"
)

// unreadBudget bounds the answers waiting for window over all the
// connections of a listener (MaxUnreadTotal), each with the answers it
// leaves waiting now, however few: when all of them together leave more
// than the bound, the ones that have left answers waiting longest, on
// end, are closed, at once, until the rest are within it. Those waiting
// longest, not those leaving the most: a client that reads its answers,
// with small windows and many calls in flight, may leave as many waiting
// at a moment as one that reads none (up to its calls in flight), but
// each window it grants lets its answers through, which leaves none
// waiting for a moment and puts it last, where a client not reading
// keeps its place until it is closed. A connection leaving none waiting
// (Envoy's, whose windows are 16 MiB a call) never counts. Connections
// leaving 100 or fewer waiting used not to count either: 10,000 of them
// held some 3 GB.
type unreadBudget struct{ connBudget }

func newUnreadBudget(max int) *unreadBudget {
	return &unreadBudget{connBudget{max: int64(max), entry: func(u *unreadConn) *budgetEntry { return &u.entry }}}
}

// connBudget bounds what the connections of a listener hold together (the
// answers they leave waiting for window, unreadBudget; the bytes of their
// requests not yet whole, requestBudget): it lists the connections
// holding any, each by its entry, and when their total passes max it
// gives up connections, at once, until the rest are within it: those
// listed longest, or with oldest those whose since is least (of equals,
// the one listed longest).
type connBudget struct {
	max      int64
	entry    func(u *unreadConn) *budgetEntry // u's place in this budget
	oldest   bool                             // give up those whose since is least first
	evicting func(v *unreadConn, total int64) // told of each given up, under mu; may be nil

	mu         sync.Mutex
	total      int64       // held on the connections listed
	peak       int64       // the most total held once within the bound
	head, tail *unreadConn // the connections holding any, longest listed first
}

// budgetEntry is a connection's place in a connBudget, under its mu.
type budgetEntry struct {
	prev, next *unreadConn
	listed     bool   // it holds some: it is in the list
	evicted    bool   // given up for the budget
	charged    int64  // what it holds, as counted in total
	since      uint64 // with oldest, when what it holds began: its place in line
}

// update records that u holds n (listed last if it held none), which
// began at since (with oldest), and returns the connections to close (u
// among them, perhaps) for the bound, which it no longer counts. Call it
// with u.mu held.
func (b *connBudget) update(u *unreadConn, n int64, since uint64) []*unreadConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entry(u)
	if e.evicted {
		return nil
	}
	if n <= 0 {
		if e.listed {
			b.unlink(u)
		}
		return nil
	}
	if !e.listed {
		e.listed, e.prev = true, b.tail
		if b.tail != nil {
			b.entry(b.tail).next = u
		} else {
			b.head = u
		}
		b.tail = u
	}
	b.total += n - e.charged
	e.charged, e.since = n, since
	var closing []*unreadConn
	for b.total > b.max && b.head != nil {
		v := b.head
		if b.oldest {
			for w := b.entry(v).next; w != nil; w = b.entry(w).next {
				if b.entry(w).since < b.entry(v).since {
					v = w
				}
			}
		}
		if b.evicting != nil {
			b.evicting(v, b.total)
		}
		b.unlink(v)
		b.entry(v).evicted = true
		closing = append(closing, v)
	}
	b.peak = max(b.peak, b.total)
	return closing
}

// unlink takes u out of the list and what it holds out of the total.
func (b *connBudget) unlink(u *unreadConn) {
	e := b.entry(u)
	if e.prev != nil {
		b.entry(e.prev).next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		b.entry(e.next).prev = e.prev
	} else {
		b.tail = e.prev
	}
	b.total -= e.charged
	*e = budgetEntry{evicted: e.evicted}
}

// held returns what the connections hold now, and the most they held at
// once within the bound.
func (b *connBudget) held() (total, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total, b.peak
}

// closeFor closes u, counted once in closed, for why: a budget gave it up
// (update returned it) or its clock ran out. It must not be called with
// u.mu held.
func (u *unreadConn) closeFor(why error, closed *atomic.Uint64) {
	u.mu.Lock()
	fire := !u.over && !u.shut
	if fire {
		u.stop(why)
	}
	u.mu.Unlock()
	if fire {
		closed.Add(1)
		u.Conn.Close()
	}
}
