package deferq

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/rueidis"
)

// The scan that ends at the stream's last entry when it began loses no
// request an earlier version queued, whatever comes between its steps:
// taken up from the state of a scan that had no end (the last entry id
// looked at, alone), a step whose second half never ran (its reply lost)
// is made again, a request queued meanwhile, one deleted from the stream
// between steps, and one queued after the scan's end. Once the scan is
// over, each request still in the stream is indexed with its key's list
// named in its record; each gone from the stream, unindexed, has its
// record cleaned by the pass over the records, and so does the one past
// the scan's end once it is trimmed before its turn. (Their ids stay in
// their keys' lists: their records, never named, do not say which.)
func TestScanBoundedLosesNoOldRequest(t *testing.T) {
	w, c := jobsWorker(t)
	ctx := context.Background()
	do := func(args ...string) string {
		t.Helper()
		r := c.Do(ctx, c.B().Arbitrary(args[0]).Keys(args[1]).Args(args[2:]...).Build())
		if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		s, _ := r.ToString() // "" for a reply that is no string
		return s
	}
	if err := c.Do(ctx, c.B().XgroupCreate().Key(w.base+"q").Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	type req struct{ id, sid, key string }
	var reqs []req
	// add queues a request as an earlier version did: its entry, its
	// record (no list named), its place in its key's list, no index.
	add := func() req {
		t.Helper()
		n := len(reqs) + 1
		r := req{id: fmt.Sprintf("%s-%020d", w.tag, n), key: fmt.Sprintf("k%d", n)}
		r.sid = do("XADD", w.base+"q", "*", "id", r.id, "key", r.key, "method", "POST", "uri", "/", "header", "{}", "body", "b")
		do("HSET", w.base+"s:"+r.id, "state", "queued", "rule", "jobs", "sid", r.sid, "attempts", "0")
		do("RPUSH", w.base+"k:"+keyDigest(r.key), r.id)
		reqs = append(reqs, r)
		return r
	}
	step := func(lost bool) bool {
		t.Helper()
		s, err := w.scanSlice(ctx, c, 1, scanBytes)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.reqs) == 0 || lost {
			return s.done
		}
		done, err := w.nameLists(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	r1 := add()
	for range 3 {
		add()
	}
	// The scan with no end looked at r1, and indexed it, by an earlier
	// build: its state is r1's entry id alone.
	do("HSET", w.base+"i", r1.sid, r1.id)
	do("HSET", w.base+"s:"+r1.id, "list", keyDigest(r1.key))
	do("SET", w.base+"scan", r1.sid)

	step(true) // r2 found, its reply lost: nothing named, the state as it was
	add()      // r5, queued meanwhile
	if step(false) {
		t.Fatal("the scan over after 2 steps of 1 entry")
	}
	late := add()                       // r6, after the scan's end was set
	do("XDEL", w.base+"q", reqs[2].sid) // r3, deleted before the scan reached it
	for i := 0; !step(false); i++ {
		if i == 10 {
			t.Fatal("the scan of 6 entries not over after 12 steps")
		}
	}
	if st := do("GET", w.base+"scan"); st != "done" {
		t.Fatalf("the scan's state once over: %q, want done", st)
	}
	do("XDEL", w.base+"q", late.sid) // trimmed before its turn
	passOnce(t, w, c)

	for _, r := range reqs {
		es, err := c.Do(ctx, c.B().Xrange().Key(w.base+"q").Start(r.sid).End(r.sid).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		inStream := len(es) == 1
		rec, err := c.Do(ctx, c.B().Hgetall().Key(w.base+"s:"+r.id).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		list, err := c.Do(ctx, c.B().Lrange().Key(w.base+"k:"+keyDigest(r.key)).Start(0).Stop(-1).Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		indexed := do("HGET", w.base+"i", r.sid)
		switch {
		case !inStream:
			if len(rec) != 0 || indexed != "" {
				t.Errorf("%s, gone from the stream: record %v, index %q; want none", r.id, rec, indexed)
			}
		default:
			if rec["list"] != keyDigest(r.key) || indexed != r.id || len(list) != 1 {
				t.Errorf("%s, in the stream: record %v, index %q, its key's list %v; want its list named, indexed, listed", r.id, rec, indexed, list)
			}
		}
	}
}
