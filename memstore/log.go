package memstore

import (
	"strings"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// logEntry is the state of a sliding window log or a multi-segment counter.
type logEntry struct {
	st   sluice.State
	idle int64
	// arr is the whole array st.Log lies at the end of (a sliding log's
	// times leave from the front and arrive at the back), so that the log
	// can move back to its start instead of growing into a new one.
	arr []int64
}

// logKey returns ns+key, the key of a log state; ns is the namespace's
// stored form (see Store.hash). When it fits in buf it writes it there and
// returns a string sharing buf's memory: valid only while buf is, and only
// for lookups (a key kept is copied with strings.Clone), so a log
// decision costs no allocation for its key. A key without a namespace
// that starts with 0xFF goes behind textMark, as a namespace kept as its
// text does (asText): the log map compares whole keys, and such a key
// must not read as a numbered namespace's key.
func logKey(ns, key string, buf *[maxStackKey]byte) string {
	if ns == "" {
		if key == "" || key[0] != 0xFF {
			return key
		}
		ns = textMark
	}
	n := len(ns) + len(key)
	if n > maxStackKey {
		return ns + key
	}
	b := append(append(buf[:0], ns...), key...)
	return unsafe.String(unsafe.SliceData(b), n)
}

// maxStackKey bounds the log keys built without allocating.
const maxStackKey = 128

func (s *Store) takeLog(sh *shard, key string, r *sluice.Request, cost, now int64, d *sluice.Decision) error {
	le := sh.logs[key]
	var st sluice.State
	if le != nil && now < le.idle {
		st = le.st
		if r.Algorithm == sluice.SlidingWindowLog {
			st.Log = le.roomFor(st.Log, min(cost, r.Limit.Rate+1))
		}
	}
	idle, err := step(r, cost, d, &st, now)
	if err == nil {
		s.putLog(sh, key, le, st, idle, now)
	}
	return err
}

// roomFor returns log, the entry's sliding log, where n more times can be
// appended without a new array when its array has that room: a log that
// has reached the end of its array moves back to the array's start, over
// the times that have left it. A log at a steady size then never
// allocates, where append would copy it into a new array (garbage, and a
// GC that turns write barriers on) every few hundred decisions.
func (le *logEntry) roomFor(log []int64, n int64) []int64 {
	if n <= 0 || int64(cap(log)-len(log)) >= n || int64(cap(le.arr)) < int64(len(log))+n || !sameEnd(log, le.arr) {
		return log
	}
	return append(le.arr[:0], log...) // copy: overlapping moves are safe
}

// sameEnd reports whether a and b end at the same place: b's array holds a.
func sameEnd(a, b []int64) bool {
	return cap(a) > 0 && cap(b) > 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(a)))+uintptr(cap(a))*8 == uintptr(unsafe.Pointer(unsafe.SliceData(b)))+uintptr(cap(b))*8
}

// putLog writes a log state for key, whose entry le (nil: absent) the
// caller has already looked up. A new key at rest is not worth keeping.
func (s *Store) putLog(sh *shard, key string, le *logEntry, st sluice.State, idle, now int64) {
	if le == nil {
		if idle <= now {
			return
		}
		le = &logEntry{}
		s.insert(sh, now)
		sh.logs[strings.Clone(key)] = le
		sh.logsPeak = max(sh.logsPeak, uint32(len(sh.logs)))
	}
	le.st, le.idle = st, idle
	if cap(st.Log) > 0 && !sameEnd(st.Log, le.arr) {
		le.arr = st.Log[:0:cap(st.Log)] // the log moved to a new array
	}
}
