package deferq

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

//go:embed status.lua
var statusLua string

var statusScript = rueidis.NewLuaScript(statusLua)

// Status is where a deferred request stands.
type Status struct {
	ID    string `json:"deferred_id"`
	Rule  string `json:"rule"`
	State string `json:"state"` // queued, failed (will be retried), delivered, dead_lettered
	// Status is the upstream's HTTP status: of the delivery, or of the last
	// failed attempt (0 when it failed without an answer).
	Status   int    `json:"status,omitempty"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
	QueuedAt string `json:"queued_at"`
	Updated  string `json:"updated_at"`
	// NextAttempt is when a failed request will be tried again (RFC 3339).
	NextAttempt string `json:"next_attempt_at,omitempty"`
}

// Status reads where id stands: ErrBadID for a string that is no id,
// ErrUnknownID for an id never issued, whose record has expired, or whose
// request is gone from the stream (deleted or trimmed by hand before an
// instance read it: nothing will send it).
//
// ErrUnknownID is final for StatusTTL: it leaves a mark in Redis that an
// enqueue of id arriving later (one whose outcome was unknown, still on
// its way) finds, and then queues nothing. So a client that reads it may
// send the request again without having it done twice. (A request still
// queued whose record expired is not affected: its next turn makes its
// record again.)
func (q *Queue) Status(ctx context.Context, id string) (Status, error) {
	tag, err := parseID(id)
	if err != nil {
		return Status{}, err
	}
	c := q.o.Connect()
	if c == nil {
		return Status{}, errNotConnected
	}
	key := q.base(tag) + "s:" + id
	m, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err == nil && (len(m) == 0 || m["state"] == "queued" || m["state"] == "failed") {
		// No record, or one of a request that may be gone (its entry
		// deleted or trimmed by hand): look again, and mark it in the
		// same step if there is none or it is gone. A plain read first,
		// so that reading a settled record writes nothing, even to a
		// Redis out of memory (nor does the script for a request waiting).
		ttl := strconv.FormatInt(q.o.StatusTTL.Milliseconds(), 10)
		m, err = statusScript.Exec(ctx, c, []string{key, q.base(tag) + "q", q.base(tag) + "i"}, []string{ttl, group}).AsStrMap()
	}
	if err != nil {
		return Status{}, fmt.Errorf("deferq: status: %w: %w", sluice.ErrStoreUnavailable, err)
	}
	if len(m) == 0 || m["state"] == "not_found" {
		return Status{}, fmt.Errorf("%w: %s", ErrUnknownID, id)
	}
	ms := func(f string) string {
		v, err := strconv.ParseInt(m[f], 10, 64)
		if err != nil || v == 0 {
			return ""
		}
		return time.UnixMilli(v).UTC().Format(time.RFC3339Nano)
	}
	st := Status{ID: id, Rule: m["rule"], State: m["state"], Error: m["error"], QueuedAt: ms("at"), Updated: ms("updated")}
	st.Status, _ = strconv.Atoi(m["status"])
	st.Attempts, _ = strconv.Atoi(m["attempts"])
	if st.State == "failed" {
		st.NextAttempt = ms("next")
	}
	return st, nil
}
