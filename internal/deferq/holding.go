package deferq

// holding is what the dispatcher holds (dispatch owns it, alone): the
// entries by stream id, and by limiter key in stream order.
type holding struct {
	w     *worker
	byKey map[string][]*entry
	bySID map[string]*entry
	// again holds a copy read again (a claim round, here) of an entry
	// whose turn is in flight, until that turn ends: the turn may have
	// let the entry go (release.lua, read.lua: idle for ClaimIdle at
	// once, so the next claim round, this instance's too, takes it), and
	// then the copy is the one held; else it is dropped (held already).
	// Without it, an entry let go and claimed back here before its turn
	// ended was dropped twice, held by nobody until ClaimIdle.
	again map[string]*entry
}

func newHolding(w *worker) *holding {
	return &holding{w: w, byKey: map[string][]*entry{}, bySID: map[string]*entry{}, again: map[string]*entry{}}
}

// add takes the entries the reader (or a turn's claim) read.
func (h *holding) add(es []*entry) {
	for _, e := range es {
		if old, ok := h.bySID[e.sid]; ok {
			if _, waiting := h.again[e.sid]; old.busy && !waiting {
				h.again[e.sid] = e
				continue
			}
			h.w.hold(e, -1) // held already
			continue
		}
		h.put(e)
	}
}

func (h *holding) put(e *entry) {
	h.bySID[e.sid] = e
	h.byKey[e.key] = insertOrdered(h.byKey[e.key], e)
}

// remove forgets e, settled or let go.
func (h *holding) remove(e *entry) {
	delete(h.bySID, e.sid)
	l := h.byKey[e.key]
	for i, x := range l {
		if x == e {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(h.byKey, e.key)
	} else {
		h.byKey[e.key] = l
	}
	h.w.hold(e, -1)
}

// ended takes the end of e's turn: e is forgotten (drop), its copy read
// again meanwhile held in its place, if any; or it stays, and the copy
// is dropped.
func (h *holding) ended(e *entry, drop bool) {
	e.busy = false
	a, ok := h.again[e.sid]
	delete(h.again, e.sid)
	if drop {
		h.remove(e)
		if ok {
			h.put(a)
		}
		return
	}
	if ok {
		h.w.hold(a, -1)
	}
}
