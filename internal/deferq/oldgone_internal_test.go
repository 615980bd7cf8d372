package deferq

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
)

// oldGoneRounds bounds the claim rounds that clean what a request an
// earlier version queued leaves once it is trimmed away: the pass over
// the rule's records covers a keyspace as small as a test's in one
// round, and a record written after a pass went by is met by the next.
const oldGoneRounds = 3

// A request an earlier version queued (no stream-id index entry) and
// trimmed or deleted from the stream before any instance of this version
// met it leaves no record behind: the claim rounds clean its record, and
// its place in its key's list when the record names it, unasked, within
// a few rounds. Trimmed before the scan for such requests reached it, or
// queued by an instance of that version after the scan was over, its
// record read "queued" until someone asked about it, or for 7 days.
func TestOldRequestTrimmedUnseenCleaned(t *testing.T) {
	for _, tc := range []struct {
		name string
		// afterScan: the request is queued once the scan is over.
		afterScan bool
		// list: its record names its key's list (an earlier version
		// that named it, and had no index yet).
		list bool
		// held: an instance of that version read it, and is gone.
		held bool
	}{
		{name: "trimmed before the scan"},
		{name: "trimmed before the scan, its list named", list: true},
		{name: "held by an instance gone, trimmed before the scan", held: true},
		{name: "queued after the scan was over", afterScan: true},
		{name: "queued after the scan was over, its list named", afterScan: true, list: true},
		{name: "queued after the scan was over, held by an instance gone", afterScan: true, held: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, c := jobsWorker(t)
			ctx := context.Background()
			do := func(cmd rueidis.Completed) {
				t.Helper()
				if err := c.Do(ctx, cmd).Error(); err != nil {
					t.Fatal(err)
				}
			}
			do(c.B().XgroupCreate().Key(w.base + "q").Group(group).Id("0").Mkstream().Build())
			s := w.steps(ctx, c)
			round := func() {
				t.Helper()
				if !s.claim() {
					t.Fatal("claim round: ctx ended")
				}
			}
			if tc.afterScan {
				for i := 0; ; i++ {
					round()
					if st, _ := c.Do(ctx, c.B().Get().Key(w.base+"scan").Build()).ToString(); st == "done" {
						break
					}
					if i == 10 {
						t.Fatal("the scan of an empty stream not over after 10 rounds")
					}
				}
			}
			// The earlier version queues it: its entry, its record and
			// its place in its key's list; no index entry.
			id := w.tag + "-00000000000000000001"
			h := keyDigest("a")
			sid, err := c.Do(ctx, c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", "a").
				FieldValue("method", "POST").FieldValue("uri", "/").FieldValue("header", "{}").FieldValue("body", "b").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			rec := c.B().Hset().Key(w.base+"s:"+id).FieldValue().FieldValue("state", "queued").FieldValue("rule", "jobs").
				FieldValue("sid", sid).FieldValue("attempts", "0")
			if tc.list {
				rec = rec.FieldValue("list", h)
			}
			do(rec.Build())
			do(c.B().Pexpire().Key(w.base + "s:" + id).Milliseconds(queuedTTL.Milliseconds()).Build())
			do(c.B().Rpush().Key(w.base + "k:" + h).Element(id).Build())
			if tc.held {
				// Read by an instance of that version, gone since: idle
				// for two hours, past any claim.
				do(c.B().Xreadgroup().Group(group, "old").Count(1).Streams().Key(w.base + "q").Id(">").Build())
				do(c.B().Xclaim().Key(w.base + "q").Group(group).Consumer("old").MinIdleTime("0").Id(sid).Idle(7_200_000).Justid().Build())
			}
			do(c.B().Xtrim().Key(w.base + "q").Maxlen().Threshold("0").Build())

			for i := 1; ; i++ {
				round()
				n, err := c.Do(ctx, c.B().Exists().Key(w.base+"s:"+id).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				if i == oldGoneRounds {
					m, _ := c.Do(ctx, c.B().Hgetall().Key(w.base+"s:"+id).Build()).AsStrMap()
					t.Fatalf("the record of a request trimmed away still there after %d claim rounds: %v", i, m)
				}
			}
			l, err := c.Do(ctx, c.B().Lrange().Key(w.base+"k:"+h).Start(0).Stop(-1).Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			if tc.list && len(l) != 0 {
				t.Errorf("its key's list, named in its record, once the record was cleaned: %v, want none", l)
			}
			if n, err := c.Do(ctx, c.B().Exists().Key(w.base+"i").Build()).AsInt64(); err != nil || n != 0 {
				t.Errorf("the stream-id index once the record was cleaned: %d keys (%v), want none", n, err)
			}
		})
	}
}
