// Package logthrottle bounds log lines that requests can cause: one per
// second, with a count of those left out, so that a client, or a failing
// upstream or store, cannot make the daemon write a line per request.
package logthrottle

import (
	"sync/atomic"
	"time"
)

// Throttle lets one event through per second and counts the others. The
// zero value is ready; it is safe for concurrent use.
type Throttle struct{ last, dropped atomic.Int64 }

// OK reports whether an event at now is let through (the first of its
// second); if not, it is counted among the dropped.
func (t *Throttle) OK(now time.Time) bool {
	sec := now.Unix()
	old := t.last.Load()
	if old != sec && t.last.CompareAndSwap(old, sec) {
		return true
	}
	t.dropped.Add(1)
	return false
}

// Dropped returns the events not let through since its last call.
func (t *Throttle) Dropped() int64 { return t.dropped.Swap(0) }
