package deferq

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// oldLayout starts a Redis with one request of rule jobs queued by an
// earlier version (no stream-id index entry, no key's list named in its
// record), of key "a", and the rule's group: it returns the worker of
// an instance of this version, its client, the request's id and entry.
func oldLayout(t *testing.T) (*worker, rueidis.Client, string, string) {
	t.Helper()
	w, c := jobsWorker(t)
	ctx := context.Background()
	id := w.tag + "-00000000000000000001"
	if err := c.Do(ctx, c.B().XgroupCreate().Key(w.base+"q").Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	sid, err := c.Do(ctx, c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", "a").
		FieldValue("method", "POST").FieldValue("uri", "/").FieldValue("header", "{}").FieldValue("body", "b").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []rueidis.Completed{
		c.B().Hset().Key(w.base+"s:"+id).FieldValue().FieldValue("state", "queued").FieldValue("rule", "jobs").FieldValue("sid", sid).FieldValue("attempts", "0").Build(),
		c.B().Rpush().Key(w.base + "k:" + keyDigest("a")).Element(id).Build(),
	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return w, c, id, sid
}

// A scan step whose second half never ran (scan.lua's reply lost on its
// way back, the connection cut; or listed.lua failing, READONLY in a
// failover) is made again: the records it found get their key's list
// named by a later step, the scan's state not having moved past them.
// It had moved (and to 'done' at the stream's end): such a record never
// got its list, and once its request was trimmed away its id stayed in
// its key's list for good.
func TestScanStepHalfDoneIsMadeAgain(t *testing.T) {
	w, c, id, _ := oldLayout(t)
	ctx := context.Background()
	if _, err := w.scanSlice(ctx, c, scanEntries, scanBytes); err != nil { // its reply lost: nothing named
		t.Fatal(err)
	}
	for i := 0; !w.scanOld(ctx, c); i++ {
		if i == 10 {
			t.Fatal("the scan of one entry not over after 10 steps")
		}
	}
	if l, err := c.Do(ctx, c.B().Hget().Key(w.base+"s:"+id).Field("list").Build()).ToString(); err != nil || l != keyDigest("a") {
		t.Errorf("the record's list after the scan is over: %q, %v; want %s", l, err, keyDigest("a"))
	}
}

// A request trimmed away between the two halves of a scan step, and
// forgotten by another instance's sweep meanwhile, still leaves its key's
// list: the sweep after the step forgets it whole. The first half indexed
// it, so the sweep deleted its record, naming no list, and the second
// half found no record to name it in: its id stayed in its key's list,
// which has no expiry, for good.
func TestScanStepTrimmedBetween(t *testing.T) {
	w, c, id, sid := oldLayout(t)
	ctx := context.Background()
	s, err := w.scanSlice(ctx, c, scanEntries, scanBytes)
	if err != nil || len(s.reqs) != 1 {
		t.Fatalf("scanSlice: %+v, %v; want the one request", s, err)
	}
	if err := c.Do(ctx, c.B().Xdel().Key(w.base+"q").Id(sid).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	w.sweep(ctx, c, "0") // another instance's claim round
	if _, err := w.nameLists(ctx, c, s); err != nil {
		t.Fatal(err)
	}
	w.sweep(ctx, c, "0") // the next claim round's
	if n, err := c.Do(ctx, c.B().Exists().Key(w.base+"s:"+id, w.base+"k:"+keyDigest("a"), w.base+"i").Build()).AsInt64(); err != nil || n != 0 {
		l, _ := c.Do(ctx, c.B().Lrange().Key(w.base+"k:"+keyDigest("a")).Start(0).Stop(-1).Build()).AsStrSlice()
		t.Errorf("after the trimmed request was swept: %d of its record, its key's list %v and the index left (%v); want none", n, l, err)
	}
}

// jobsWorker starts a Redis and returns the worker of rule jobs of an
// instance of this version on it, and its client.
func jobsWorker(t *testing.T) (*worker, rueidis.Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	q, err := New(Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(q, &Rule{Name: "jobs"}, "x")
	w.recordsEvery = 0 // the tests' claim rounds come back to back
	return w, c
}
