package deferq

import (
	"context"
	"strconv"
	"testing"
)

// A held request let go to make room (letGo, or claimHead's swap: idle
// for ClaimIdle at once, so that the next claim round takes it) can be
// claimed back by this instance's own claim round before its turn's end
// reaches the dispatcher: the copy read again was dropped as held
// already, then the turn's end dropped the old one, and the request sat
// pending with this instance, held by nobody, until ClaimIdle passed
// (and its key's later requests with it).
func TestLetGoClaimedBackBeforeTurnEnds(t *testing.T) {
	w, c, es, _ := heads(t, 1<<30, 1, 1, 1)
	ctx := context.Background()
	e := es[0]
	h := newHolding(w)
	h.add(es)
	e.busy = true // its turn is in flight (dispatch)
	idle := strconv.FormatInt(w.q.o.ClaimIdle.Milliseconds(), 10)
	if r := w.letGo(ctx, e, idle); !r.drop {
		t.Fatalf("letGo = %+v, want the request let go (drop)", r)
	}
	// The reader's claim round, before the turn's end reaches dispatch.
	g := w.reserve(100)
	_, xs, err := w.readEntries(ctx, c, []string{group, w.consumer, "claim", strconv.FormatInt(g.n, 10),
		strconv.FormatInt(w.rule.Load().MaxBody(), 10), idle, "0-0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []*entry, 1)
	go func() { got <- <-w.in }()
	if !w.send(ctx, xs, &g) {
		t.Fatal("send failed")
	}
	b := <-got
	claimed := false
	for _, x := range b {
		claimed = claimed || x.sid == e.sid
	}
	if !claimed {
		t.Fatalf("the claim round did not claim %s, let go: %d entries", e.sid, len(b))
	}
	h.add(b)
	h.ended(e, true)
	if _, ok := h.bySID[e.sid]; !ok {
		p, _ := c.Do(ctx, c.B().Xpending().Key(w.base+"q").Group(group).Start(e.sid).End(e.sid).Count(1).Build()).ToArray()
		owner := ""
		if len(p) == 1 {
			r, _ := p[0].ToArray()
			owner, _ = r[1].ToString()
		}
		t.Errorf("%s, let go and claimed back by this instance (pending with %q) before its turn ended: held by nobody (held %d), until ClaimIdle", e.sid, owner, w.held.Load())
	}
	if n := w.held.Load(); n != int64(len(h.bySID)) {
		t.Errorf("held counts %d, the dispatcher holds %d", n, len(h.bySID))
	}
}
