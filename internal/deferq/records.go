package deferq

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

//go:embed records.lua
var recordsLua string

var recordsScript = rueidis.NewLuaScript(recordsLua)

// recordsCount is SCAN's COUNT in one step of the pass over a rule's
// records: about as many keys of the Redis node looked at a step. The
// fleet takes at most one step a claim interval (worker.recordsEvery,
// 5 s by default) for each rule, however many instances it has, so the
// pass costs Redis one SCAN of 1,000 keys per rule every 5 s, and a node
// of a million keys is passed over in about 83 minutes.
const recordsCount = 1000

// passRecords runs one step of the pass over the rule's records
// (records.lua), which cleans the records of requests gone that no
// claim, sweep or scan meets: requests an earlier version queued, not in
// the stream-id index, trimmed away before any instance of this version
// met them.
func (w *worker) passRecords(ctx context.Context, c rueidis.Client) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := recordsScript.Exec(ctx, c, []string{w.base + "q", w.base + "i", w.base + "records"},
		[]string{group, globEscape(w.base) + "s:*", strconv.Itoa(recordsCount), strconv.FormatInt(queuedTTL.Milliseconds(), 10),
			strconv.FormatInt(w.recordsEvery.Milliseconds(), 10)}).Error()
	if err != nil && ctx.Err() == nil {
		w.q.o.Logger.Warn("defer: pass over the records for requests gone", "rule", w.name, "err", err)
	}
}

// globEscape quotes s for a Redis MATCH pattern: the prefix may hold
// '*', '?', '[', ']' or '\', which would match other keys. Byte by byte,
// as Redis matches: a prefix that is not UTF-8 keeps its bytes (read as
// runes, each such byte became U+FFFD, and the pattern matched none of
// the rule's records).
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`\*?[]`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
