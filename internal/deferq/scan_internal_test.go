package deferq

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/rueidis"
)

// The scan for requests queued by an earlier version is bounded and
// resumable: a run looks at no more entries than it is given, and stops
// once those it looked at hold the bytes it is given (the entry that
// passes them is the last it looks at); the next run, whichever instance makes
// it, goes on after the last entry looked at (the state is in Redis); an
// entry that is no request of the rule is passed over, unindexed; a
// request whose record is of another entry is indexed but its record left
// as it is; and once the stream's end is reached the scan is over for
// good: an entry added after is left to the turn that indexes it.
func TestScanOldBoundedResumable(t *testing.T) {
	w, c := jobsWorker(t)
	ctx := context.Background()
	do := func(cmd rueidis.Completed) string {
		t.Helper()
		s, err := c.Do(ctx, cmd).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		return s
	}
	add := func(id, key, body string) string {
		t.Helper()
		return do(c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", key).
			FieldValue("method", "POST").FieldValue("uri", "/").FieldValue("header", "{}").FieldValue("body", body).Build())
	}
	record := func(id, sid string) {
		t.Helper()
		if err := c.Do(ctx, c.B().Hset().Key(w.base+"s:"+id).FieldValue().FieldValue("state", "queued").FieldValue("rule", "jobs").FieldValue("sid", sid).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	id1, id2, id3 := w.tag+"-00000000000000000001", w.tag+"-00000000000000000002", w.tag+"-00000000000000000003"
	sid1 := add(id1, "a", "small")
	record(id1, sid1)
	sidBad := add("not-an-id", "b", "small")
	sid2 := add(id2, "c", strings.Repeat("x", 1000))
	record(id2, "1-1") // a record of another entry
	sid3 := add(id3, "d", "small")
	record(id3, sid3)
	// One step, as scanOld makes it, with the bounds given.
	run := func(most, bytes int) (looked, done int64, listed []string) {
		t.Helper()
		s, err := w.scanSlice(ctx, c, most, bytes)
		if err != nil {
			t.Fatalf("scan.lua: %v", err)
		}
		if len(s.reqs) > 0 {
			if _, err := w.nameLists(ctx, c, s); err != nil {
				t.Fatalf("listed.lua: %v", err)
			}
		}
		for _, r := range s.reqs {
			listed = append(listed, r.id, r.sid, r.key)
		}
		if s.done {
			done = 1
		}
		return int64(s.looked), done, listed
	}
	state := func() string { return do(c.B().Get().Key(w.base + "scan").Build()) }
	indexed := func(sid string) string { return do(c.B().Hget().Key(w.base + "i").Field(sid).Build()) }

	if looked, done, listed := run(1, 1000000); looked != 1 || done != 0 || strings.Join(listed, " ") != id1+" "+sid1+" a" || state() != sid1 {
		t.Errorf("first run, one entry at most: looked %d, done %d, to list %v, state %q; want 1, 0, %s %s a, %s", looked, done, listed, state(), id1, sid1, sid1)
	}
	if indexed(sid1) != id1 {
		t.Errorf("index of %s after the first run: %q, want %s", sid1, indexed(sid1), id1)
	}
	// 100 bytes at most: the malformed entry, then the large one, which
	// passes the bound, and no more.
	if looked, done, listed := run(10, 100); looked != 2 || done != 0 || len(listed) != 0 || state() != sid2 {
		t.Errorf("second run, 100 bytes at most: looked %d, done %d, to list %v, state %q; want 2, 0, none (its record is another entry's), %s", looked, done, listed, state(), sid2)
	}
	if indexed(sidBad) != "" {
		t.Errorf("an entry of no request indexed: %q", indexed(sidBad))
	}
	if indexed(sid2) != id2 {
		t.Errorf("index of %s: %q, want %s", sid2, indexed(sid2), id2)
	}
	// The rest by scanOld, as a claim round runs it: it indexes the last
	// and names its key's list in its record.
	if !w.scanOld(ctx, c) || state() != "done" {
		t.Fatalf("scanOld at the stream's end: state %q, want done", state())
	}
	// The state expires, a queued record's life on, so that a rule no
	// longer configured leaves no key behind.
	if pttl, err := c.Do(ctx, c.B().Pttl().Key(w.base+"scan").Build()).AsInt64(); err != nil || pttl <= 0 || pttl > queuedTTL.Milliseconds() {
		t.Errorf("PTTL of the scan's state: %d (%v), want in (0, %d]", pttl, err, queuedTTL.Milliseconds())
	}
	if indexed(sid3) != id3 || do(c.B().Hget().Key(w.base+"s:"+id3).Field("list").Build()) != keyDigest("d") {
		t.Errorf("%s after scanOld: indexed as %q, its record's list %q; want %s, %s", sid3, indexed(sid3),
			do(c.B().Hget().Key(w.base+"s:"+id3).Field("list").Build()), id3, keyDigest("d"))
	}
	if do(c.B().Hget().Key(w.base+"s:"+id2).Field("list").Build()) != "" {
		t.Errorf("the record of another entry was given a list")
	}
	sid4 := add(w.tag+"-00000000000000000004", "e", "small")
	if looked, done, _ := run(10, 1000000); looked != 0 || done != 1 || indexed(sid4) != "" {
		t.Errorf("a run after the scan is over: looked %d, done %d, %s indexed %q; want 0, 1, not indexed", looked, done, sid4, indexed(sid4))
	}
}
