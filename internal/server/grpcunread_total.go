package server

import "sync"

// unreadBudget bounds the answers waiting for window over all the
// connections of a listener (MaxUnreadTotal). A connection counts toward
// it while its clock runs (more than MaxUnreadAnswers of its answers
// waited, and those it started with are not yet sent), with the answers
// waiting now; when all of them together leave more than the bound, the
// ones whose clock has run longest are closed, at once, until the rest
// are within it. Those waiting longest, not those leaving the most:
// a client that reads its answers, with small windows and many calls in
// flight, may leave as many waiting at a moment as one that reads none
// (up to its calls in flight), but its clock keeps starting anew, as the
// answers it started with are sent, where a client not reading keeps the
// one clock until it is closed. A connection whose clock does not run
// (Envoy's, whose windows are 16 MiB a call) never counts.
type unreadBudget struct {
	max int

	mu         sync.Mutex
	total      int         // answers waiting on the connections listed
	head, tail *unreadConn // the connections whose clock runs, oldest first
}

func newUnreadBudget(max int) *unreadBudget { return &unreadBudget{max: max} }

// budgetEntry is a connection's place in its listener's unreadBudget,
// under the budget's mu.
type budgetEntry struct {
	prev, next *unreadConn
	listed     bool // its clock runs: it is in the list
	evicted    bool // closed for the budget
	charged    int  // its answers waiting, as counted in total
}

// update records that u's clock runs or not (started: it started anew),
// with n answers waiting, and returns the connections to close (u among
// them, perhaps) for the bound, which it no longer counts. Call it with
// u.mu held.
func (b *unreadBudget) update(u *unreadConn, running, started bool, n int) []*unreadConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := &u.entry
	if e.evicted {
		return nil
	}
	if e.listed && (!running || started) {
		b.unlink(u)
	}
	if !running {
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
		u.stop()
	}
	u.mu.Unlock()
	if fire {
		u.closed.Add(1)
		u.Conn.Close()
	}
}
