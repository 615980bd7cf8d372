package deferq

import (
	"context"
	"fmt"
	"time"
)

// Entries dead-lettered without a send: those that are not a queued
// request of the rule, and those whose body is over the rule's bound in
// force.

// malformed dead-letters entry sid, which is not a queued request of the
// rule (msg says why; "": its id field is not an id of the rule): it
// could never take a turn (begin.lua reads the request's record
// and its key's order by that id). If Redis does not take it, the entry
// stays pending here, and a claim brings it back after ClaimIdle.
func (w *worker) malformed(ctx context.Context, sid, id, msg string) {
	if len(id) > 40 {
		id = id[:40] + "…"
	}
	if msg == "" {
		msg = fmt.Sprintf("malformed entry: id %q is not a deferred id of rule %q", id, w.name)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := malformedScript.Exec(ctx, w.q.o.Connect(), []string{w.base + "q", w.base + "dead", w.base + "i"},
		[]string{group, sid, msg, w.deadLetters()}).AsInt64()
	if err != nil {
		w.q.o.Logger.Warn("defer: dead-letter a malformed entry", "rule", w.name, "entry", sid, "err", err)
		return
	}
	if n == 1 {
		w.q.m.deadLettered(w.name)
		if w.q.deadLog.OK(w.q.o.Now()) {
			w.q.o.Logger.Warn("defer: dead-lettered", "rule", w.name, "entry", sid, "err", msg, "suppressed", w.q.deadLog.Dropped())
		}
	}
}

// overBound dead-letters e, whose body of n bytes is over the rule's
// max_body_bytes in force (lowered by a reload since e was queued): it is
// never replayed, and not read whole. If Redis does not take the outcome
// (false), e stays pending here, and a claim brings it back after
// ClaimIdle.
func (w *worker) overBound(ctx context.Context, e *entry, n int64) bool {
	limit := w.rule.Load().MaxBody()
	msg := fmt.Sprintf("body_too_large: %d bytes, over the rule's defer.max_body_bytes (%d) when it was to be replayed; not sent", n, limit)
	state, err := w.record(ctx, e, &outcome{state: "dead", err: msg, send: randHex(8)})
	if err != nil {
		w.q.o.Logger.Warn("defer: dead-letter a request over max_body_bytes", "rule", w.name, "id", e.id, "err", err)
		return false
	}
	if state == "dead_lettered" {
		w.q.m.deadLettered(w.name)
		if w.q.deadLog.OK(w.q.o.Now()) {
			w.q.o.Logger.Warn("defer: dead-lettered", "rule", w.name, "id", e.id, "err", msg, "suppressed", w.q.deadLog.Dropped())
		}
	}
	return true
}
