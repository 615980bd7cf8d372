package deferq

// The bound on what one instance holds of a rule: MaxHeld entries and
// MaxHeldBytes (Options). Entries are added by the reader (new entries and
// claim rounds) and by turns that claim their key's older request
// (claimHead), at once: each first reserves the room for what it may read
// (reserve), counted at the largest an entry may be, under admit, so
// that each sees what the others reserved and together they never pass
// the bound; the entries read then take their places at their own size,
// and the places left unused are given back. What leaves (an entry
// settled, let go) needs no lock.

// grant is room reserved for n entries not yet read, each counted as
// held at each bytes until it is read (take) or given back (giveBack).
type grant struct{ n, each int64 }

// largest is what an entry of the rule not yet read is counted at: the
// rule's largest body and the most an entry holds besides it.
func (w *worker) largest() int64 { return w.rule.Load().MaxBody() + MaxHeadBytes }

// reserve reserves room for up to n entries (at most 100): fewer than
// MaxHeld held in all, their bytes within MaxHeldBytes, each entry not
// yet read counted at its largest (its size is not known before it is
// read). At least one while none is held (nor reserved), so that a rule
// whose bodies may be larger than MaxHeldBytes still moves, one at a time.
func (w *worker) reserve(n int64) grant {
	each := w.largest()
	w.admit.Lock()
	defer w.admit.Unlock()
	held := w.held.Load()
	n = min(n, 100, MaxHeld-held, (w.q.o.MaxHeldBytes-w.heldBytes.Load())/each)
	if held == 0 {
		n = max(n, 1)
	}
	if n < 1 {
		return grant{each: each}
	}
	w.held.Add(n)
	w.heldBytes.Add(n * each)
	return grant{n: n, each: each}
}

// reserveFor reserves room for one entry in the place of e, held, which
// is let go for it in the same script (claimHead): if the entry fits
// once e is gone, e's place is the grant's, and e no longer counts
// (e.unheld). Else nothing is reserved.
func (w *worker) reserveFor(e *entry) grant {
	each := w.largest()
	w.admit.Lock()
	defer w.admit.Unlock()
	others := w.held.Load() - 1
	if others > 0 && w.heldBytes.Load()-e.size()+each > w.q.o.MaxHeldBytes {
		return grant{each: each}
	}
	w.heldBytes.Add(each - e.size())
	e.unheld = true
	return grant{n: 1, each: each}
}

// restore gives e back the place it gave g (reserveFor), unused: the
// entry was not claimed, and e not let go.
func (w *worker) restore(e *entry, g *grant) {
	if g.n == 0 || !e.unheld {
		return
	}
	w.heldBytes.Add(e.size() - g.each)
	e.unheld = false
	g.n = 0
	w.signalRoom()
}

// take gives e, read, one of g's places, at its own size; one beyond them
// (there is none: the scripts read at most the count asked) is held too.
func (w *worker) take(g *grant, e *entry) {
	if g.n == 0 {
		w.hold(e, 1)
		return
	}
	w.heldBytes.Add(e.size() - g.each)
	g.n--
}

// giveBack gives back g's places left unused.
func (w *worker) giveBack(g *grant) {
	if g.n == 0 {
		return
	}
	w.held.Add(-g.n)
	w.heldBytes.Add(-g.n * g.each)
	g.n = 0
	w.signalRoom()
}

// hold counts e as held (d = 1) or no longer (d = -1; nothing if its
// place went to another, e.unheld); then there is room for the reader.
func (w *worker) hold(e *entry, d int64) {
	if d < 0 && e.unheld {
		w.signalRoom()
		return
	}
	w.held.Add(d)
	w.heldBytes.Add(d * e.size())
	if d < 0 {
		w.signalRoom()
	}
}

func (w *worker) signalRoom() {
	select {
	case w.room <- struct{}{}:
	default:
	}
}
