package deferq

import (
	"context"
	"fmt"
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
// as it is; and once the stream's last entry when the scan began is
// reached the scan is over for good: an entry added after is left to the
// turn that indexes it.
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

	if looked, done, listed := run(1, 1000000); looked != 1 || done != 0 || strings.Join(listed, " ") != id1+" "+sid1+" a" || state() != sid3+" "+sid1 {
		t.Errorf("first run, one entry at most: looked %d, done %d, to list %v, state %q; want 1, 0, %s %s a, %s %s (the stream's last entry, the last looked at)",
			looked, done, listed, state(), id1, sid1, sid3, sid1)
	}
	if indexed(sid1) != id1 {
		t.Errorf("index of %s after the first run: %q, want %s", sid1, indexed(sid1), id1)
	}
	// 100 bytes at most: the malformed entry, then the large one, which
	// passes the bound, and no more.
	if looked, done, listed := run(10, 100); looked != 2 || done != 0 || len(listed) != 0 || state() != sid3+" "+sid2 {
		t.Errorf("second run, 100 bytes at most: looked %d, done %d, to list %v, state %q; want 2, 0, none (its record is another entry's), %s %s",
			looked, done, listed, state(), sid3, sid2)
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

// The scan ends on a stream that keeps growing: it looks at the entries
// there when it began, and no further. Fed faster than it looks (each of
// its steps here looks at two entries, and three more requests of the
// earlier version are queued after each), it chased the stream's end for
// as long as the stream grew. Those queued after it began are left to
// their turn, or, trimmed before it, to the pass over the records.
func TestScanEndsOnGrowingStream(t *testing.T) {
	w, c := jobsWorker(t)
	ctx := context.Background()
	n := 0
	// add queues a request as an earlier version did: its entry and its
	// record, no index entry, no list named.
	add := func() string {
		t.Helper()
		n++
		id := fmt.Sprintf("%s-%020d", w.tag, n)
		sid, err := c.Do(ctx, c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", "a").
			FieldValue("method", "POST").FieldValue("uri", "/").FieldValue("header", "{}").FieldValue("body", "b").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Hset().Key(w.base+"s:"+id).FieldValue().FieldValue("state", "queued").FieldValue("sid", sid).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		return sid
	}
	before := map[string]bool{}
	for range 4 {
		before[add()] = true
	}
	var looked []string
	for step := 1; ; step++ {
		s, err := w.scanSlice(ctx, c, 2, scanBytes)
		if err != nil {
			t.Fatal(err)
		}
		done := s.done
		if len(s.reqs) > 0 {
			if done, err = w.nameLists(ctx, c, s); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range s.reqs {
			looked = append(looked, r.sid)
		}
		if done {
			break
		}
		if step == 50 {
			t.Fatalf("the scan not over after %d steps of 2 entries, the stream fed 3 a step (%d entries looked at)", step, len(looked))
		}
		for range 3 {
			add()
		}
	}
	if len(looked) != len(before) {
		t.Errorf("the scan looked at %d requests, want the %d there when it began", len(looked), len(before))
	}
	for _, sid := range looked {
		if !before[sid] {
			t.Errorf("the scan looked at %s, queued after it began", sid)
		}
	}
}

// A scan begun by an instance whose scan had no end (its state the last
// entry id looked at, alone) goes on from there, bounded by the stream's
// last entry when it is taken up, and ends there.
func TestScanUnboundedStateTakenUp(t *testing.T) {
	w, c := jobsWorker(t)
	ctx := context.Background()
	var sids []string
	for i := range 3 {
		sid, err := c.Do(ctx, c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", fmt.Sprintf("%s-%020d", w.tag, i)).
			FieldValue("key", "a").FieldValue("body", "b").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		sids = append(sids, sid)
	}
	if err := c.Do(ctx, c.B().Set().Key(w.base+"scan").Value(sids[0]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s, err := w.scanSlice(ctx, c, 1, scanBytes)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := c.Do(ctx, c.B().Get().Key(w.base+"scan").Build()).ToString()
	if s.looked != 1 || s.done || st != sids[2]+" "+sids[1] {
		t.Errorf("a step from the unbounded state %s: looked %d, done %v, state %q; want 1, false, %q", sids[0], s.looked, s.done, st, sids[2]+" "+sids[1])
	}
	if _, err := c.Do(ctx, c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", "later").Build()).ToString(); err != nil {
		t.Fatal(err)
	}
	if s, err = w.scanSlice(ctx, c, 10, scanBytes); err != nil || s.looked != 1 || !s.done {
		t.Errorf("the next step: looked %d, done %v (%v); want 1 (the last entry when the scan was taken up), done", s.looked, s.done, err)
	}
}
