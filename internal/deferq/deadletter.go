package deferq

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Entries dead-lettered without a send: those that are not a queued
// request of the rule, and those whose body is over the rule's bound in
// force.

// malformed dead-letters entry sid, fields f, which is not a queued
// request of the rule (msg says why; "": its id field is not an id of the
// rule): it could never take a turn (begin.lua reads the request's record
// and its key's order by that id). When its id is one of the rule's (its
// other keys cannot be read), the request's record says so in the same
// step: dead_lettered, with msg, for StatusTTL. If Redis does not take it,
// the entry stays pending here, and a claim brings it back after
// ClaimIdle.
func (w *worker) malformed(ctx context.Context, sid string, f map[string]string, msg string) {
	id := f["id"]
	keys := []string{w.base + "q", w.base + "dead", w.base + "i"}
	if tag, err := parseID(id); err == nil && tag == w.tag {
		keys = append(keys, w.base+"s:"+id, w.base+"k:"+keyDigest(f["key"]))
	}
	if msg == "" {
		msg = fmt.Sprintf("malformed entry: id %s is not a deferred id of rule %q", quoteShort(id, 40), w.name)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := malformedScript.Exec(ctx, w.q.o.Connect(), keys,
		[]string{group, sid, msg, w.deadLetters(), f["id"], strconv.FormatInt(w.q.o.StatusTTL.Milliseconds(), 10), w.name}).AsInt64()
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

// quoteShort quotes s, cut to its first n bytes and an ellipsis when
// longer: a damaged entry's field (up to a body's size) would otherwise
// fill the log line, the dead letter and the request's status record.
func quoteShort(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:n]) + "…"
}
