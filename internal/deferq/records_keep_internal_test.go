package deferq

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// recordsWorker is the worker of rule jobs of an instance of this
// version on c, its keys under prefix ("" the default), its pass over
// the records not held back between steps.
func recordsWorker(t *testing.T, c rueidis.Client, prefix string) *worker {
	t.Helper()
	q, err := New(Options{Client: c, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(q, &Rule{Name: "jobs"}, "x")
	w.recordsEvery = 0
	return w
}

// passOnce makes steps of the pass over the rule's records until one has
// ended a pass (its cursor back at 0): every record there was met.
func passOnce(t *testing.T, w *worker, c rueidis.Client) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		w.passRecords(ctx, c)
		if cur, err := c.Do(ctx, c.B().Get().Key(w.base+"records").Build()).ToString(); err == nil && cur == "0" {
			return
		}
		if i == 100 {
			t.Fatal("the pass over the records not over after 100 steps")
		}
	}
}

// The pass over the records deletes only the record of a request nothing
// will send: one whose entry is neither in the stream nor pending in the
// group. A request whose entry is in the stream (unread, held, or
// acknowledged and not deleted yet), or pending though deleted from the
// stream (its holder sends it), keeps its record, and so does a settled
// one (GET /v1/deferred/ID answers it for its TTL), a 404's mark, and a
// record whose sid is no entry id (written by hand: no entry to judge it
// by). Each case beside a record of a request gone, which the same pass
// deletes, with its place in its key's list and its index entry: the
// pass ran. On one Redis and on a Cluster (the script sees only its
// node, which holds every key of the rule: one hash tag).
func TestRecordsPassKeepsWhatMayStillBeSent(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		recordsKeep(t, c)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		recordsKeep(t, c)
	})
}

func recordsKeep(t *testing.T, c rueidis.Client) {
	w := recordsWorker(t, c, "")
	ctx := context.Background()
	do := func(cmd rueidis.Completed) rueidis.RedisResult {
		t.Helper()
		r := c.Do(ctx, cmd)
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	n := 0
	add := func() (string, string) {
		t.Helper()
		n++
		id := w.tag + "-" + string(rune('a'+n)) + "0000000000000000000"
		sid, err := do(c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", "a").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		return id, sid
	}
	read := func() {
		t.Helper()
		do(c.B().Xreadgroup().Group(group, "holder").Count(100).Streams().Key(w.base + "q").Id(">").Build())
	}
	record := func(id string, fv ...string) {
		t.Helper()
		cmd := c.B().Hset().Key(w.base + "s:" + id).FieldValue()
		for i := 0; i < len(fv); i += 2 {
			cmd = cmd.FieldValue(fv[i], fv[i+1])
		}
		do(cmd.Build())
	}
	do(c.B().XgroupCreate().Key(w.base + "q").Group(group).Id("0").Mkstream().Build())

	kept := map[string]string{} // record key -> the case
	keep := func(what, id string) { kept[w.base+"s:"+id] = what }

	// Read and held by a consumer: pending.
	idHeld, sidHeld := add()
	idHeldDel, sidHeldDel := add()
	idFailed, sidFailed := add()
	idAcked, sidAcked := add()
	read()
	do(c.B().Xdel().Key(w.base+"q").Id(sidHeldDel, sidFailed).Build())
	do(c.B().Xack().Key(w.base + "q").Group(group).Id(sidAcked).Build())
	// Never read.
	idUnread, sidUnread := add()
	// Gone: neither in the stream nor pending.
	idGone, sidGone := add()
	do(c.B().Xdel().Key(w.base + "q").Id(sidGone).Build())

	record(idHeld, "state", "queued", "sid", sidHeld)
	keep("queued, held", idHeld)
	record(idHeldDel, "state", "queued", "sid", sidHeldDel)
	keep("queued, held, deleted from the stream", idHeldDel)
	record(idFailed, "state", "failed", "sid", sidFailed, "next", "0")
	keep("failed, held, deleted from the stream", idFailed)
	record(idAcked, "state", "queued", "sid", sidAcked)
	keep("acknowledged, still in the stream", idAcked)
	record(idUnread, "state", "queued", "sid", sidUnread)
	keep("queued, unread", idUnread)
	for _, st := range []string{"delivered", "dead_lettered"} {
		id := w.tag + "-" + st
		record(id, "state", st, "sid", sidGone)
		keep(st+", its entry gone", id)
	}
	record(w.tag+"-mark", "state", "not_found")
	keep("a 404's mark", w.tag+"-mark")
	record(w.tag+"-nosid", "state", "queued")
	keep("queued, no sid", w.tag+"-nosid")
	for _, sid := range []string{"x", "(" + sidHeld, "(" + sidUnread, "-", "+"} {
		id := w.tag + "-sid" + sid
		record(id, "state", "queued", "sid", sid)
		keep("queued, sid "+sid+" no entry id", id)
	}
	do(c.B().Set().Key(w.base + "s:" + w.tag + "-string").Value("queued").Build())
	keep("a string where a record would be", w.tag+"-string")

	h := keyDigest("a")
	record(idGone, "state", "queued", "sid", sidGone, "list", h)
	do(c.B().Rpush().Key(w.base + "k:" + h).Element(idGone).Build())
	do(c.B().Hset().Key(w.base+"i").FieldValue().FieldValue(sidGone, idGone).Build())

	passOnce(t, w, c)

	for key, what := range kept {
		if e, err := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64(); err != nil || e != 1 {
			t.Errorf("%s: its record deleted by the pass (%v)", what, err)
		}
	}
	if e, err := c.Do(ctx, c.B().Exists().Key(w.base+"s:"+idGone, w.base+"k:"+h, w.base+"i").Build()).AsInt64(); err != nil || e != 0 {
		t.Errorf("a request gone: %d of its record, its key's list, the index left (%v); want none", e, err)
	}
}

// While the rule's group does not exist (deleted by hand, about to be
// made again) no entry can be judged not pending: the pass deletes
// nothing, whether the stream is there or not.
func TestRecordsPassNoGroupKeepsAll(t *testing.T) {
	for _, stream := range []bool{true, false} {
		name := "no stream"
		if stream {
			name = "a stream, no group"
		}
		t.Run(name, func(t *testing.T) {
			w, c := jobsWorker(t)
			ctx := context.Background()
			sid := "1-1"
			if stream {
				var err error
				if sid, err = c.Do(ctx, c.B().Xadd().Key(w.base+"q").Id("*").FieldValue().FieldValue("id", "x").Build()).ToString(); err != nil {
					t.Fatal(err)
				}
				if err := c.Do(ctx, c.B().Xdel().Key(w.base+"q").Id(sid).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			rec := w.base + "s:" + w.tag + "-00000000000000000001"
			if err := c.Do(ctx, c.B().Hset().Key(rec).FieldValue().FieldValue("state", "queued").FieldValue("sid", sid).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			passOnce(t, w, c)
			if e, err := c.Do(ctx, c.B().Exists().Key(rec).Build()).AsInt64(); err != nil || e != 1 {
				t.Errorf("the record of a request while the group is missing: deleted by the pass (%v)", err)
			}
		})
	}
}
