package server

import "sync"

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
type unreadBudget struct {
	max int

	mu         sync.Mutex
	total      int         // answers waiting on the connections listed
	head, tail *unreadConn // the connections leaving answers waiting, longest first
}

func newUnreadBudget(max int) *unreadBudget { return &unreadBudget{max: max} }

// budgetEntry is a connection's place in its listener's unreadBudget,
// under the budget's mu.
type budgetEntry struct {
	prev, next *unreadConn
	listed     bool // it leaves answers waiting: it is in the list
	evicted    bool // closed for the budget
	charged    int  // its answers waiting, as counted in total
}

// update records that u leaves n answers waiting (listed last if it left
// none) and returns the connections to close (u among them, perhaps) for
// the bound, which it no longer counts. Call it with u.mu held.
func (b *unreadBudget) update(u *unreadConn, n int) []*unreadConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := &u.entry
	if e.evicted {
		return nil
	}
	if n == 0 {
		if e.listed {
			b.unlink(u)
		}
		return nil
	}
	if !e.listed {
		e.listed, e.prev = true, b.tail
		if b.tail != nil {
			b.tail.entry.next = u
		} else {
			b.head = u
		}
		b.tail = u
	}
	b.total += n - e.charged
	e.charged = n
	var closing []*unreadConn
	for b.total > b.max && b.head != nil {
		v := b.head
		b.unlink(v)
		v.entry.evicted = true
		closing = append(closing, v)
	}
	return closing
}

// unlink takes u out of the list and its answers out of the total.
func (b *unreadBudget) unlink(u *unreadConn) {
	e := &u.entry
	if e.prev != nil {
		e.prev.entry.next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		e.next.entry.prev = e.prev
	} else {
		b.tail = e.prev
	}
	b.total -= e.charged
	*e = budgetEntry{evicted: e.evicted}
}

// evict closes u, counted once, for the budget (update returned it); it
// must not be called with u.mu held.
func (u *unreadConn) evict() {
	u.mu.Lock()
	fire := !u.over && !u.shut
	if fire {
		u.stop(errUnread)
	}
	u.mu.Unlock()
	if fire {
		u.closed.Add(1)
		u.Conn.Close()
	}
}
