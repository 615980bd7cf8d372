package deferq_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request trimmed from the stream while an instance gone held it
// (pending with its consumer, never acknowledged) is cleaned by the next
// claim round of a live instance, without anyone asking about it: its
// record, its place in its key's list and its entry in the stream-id
// index go. They used to stay until a GET /v1/deferred/ID found it gone
// (the record read "queued" for 7 days; the list, with no expiry, for
// ever). Another request, left in the stream, is delivered as before.
func TestTrimmedFromDeadHolderCleaned(t *testing.T) {
	c, q, _, stream := jobsQueue(t)
	trimmedFromDeadHolder(t, c, q, stream)
}

// The same on a Redis Cluster: the record and the key's list the claim
// round cleans are keys of the rule's hash tag, on the stream's node.
func TestTrimmedFromDeadHolderCleanedOnCluster(t *testing.T) {
	c := clusterClient(t)
	q, _ := jobsQueueOn(t, c, nil)
	trimmedFromDeadHolder(t, c, q, "sluice:defer:{"+deferq.Tag("jobs")+"}:q")
}

// trimmedFromDeadHolder queues two requests of rule "jobs" on q (not yet
// running), has consumer "dead" read the first and never come back,
// trims it from the stream, runs q, and checks that q's claim round
// cleans what the first left, and that the second is delivered.
func trimmedFromDeadHolder(t *testing.T, c rueidis.Client, q *deferq.Queue, stream string) {
	t.Helper()
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	if err := c.Do(ctx, c.B().XgroupCreate().Key(stream).Group("sluice").Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	trimmed := enqueue(t, q, "jobs", "t", http.MethodPost, "/trimmed", []byte("t"))
	if err := c.Do(ctx, c.B().Xreadgroup().Group("sluice", "dead").Count(1).Streams().Key(stream).Id(">").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	kept := enqueue(t, q, "jobs", "k", http.MethodPost, "/kept", []byte("k"))
	if err := c.Do(ctx, c.B().Xtrim().Key(stream).Minid().Threshold(sidOf(t, c, base, kept)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if n := pendingWith(t, c, "jobs", "dead"); n != 1 {
		t.Fatalf("%d entries pending with the dead consumer after the trim, want 1", n)
	}
	start(t, q)
	// The claim round that drops the trimmed entry from the group (as
	// XAUTOCLAIM drops deleted entries) cleans its record in the same
	// script: once it is no longer pending, its record must be gone.
	waitFor(t, "a claim round to drop the trimmed entry from the group", time.Minute, func() bool {
		return pendingWith(t, c, "jobs", "dead") == 0
	})
	if n := exists(t, c, base+"s:"+trimmed); n != 0 {
		m, _ := c.Do(ctx, c.B().Hgetall().Key(base+"s:"+trimmed).Build()).AsStrMap()
		t.Errorf("record of the request trimmed while a dead instance held it, after a claim round: %v, want none", m)
	}
	if got := keyList(t, c, "jobs", "t"); len(got) != 0 {
		t.Errorf("key list of the request trimmed while a dead instance held it: %v, want none", got)
	}
	awaitState(t, q, kept, "delivered")
	if n := exists(t, c, base+"i"); n != 0 {
		m, _ := c.Do(ctx, c.B().Hgetall().Key(base+"i").Build()).AsStrMap()
		t.Errorf("stream-id index once the one request left is delivered: %v, want none", m)
	}
}

// A request queued and held by an instance that is SIGKILLed, then
// trimmed from the stream: a survivor's claim round cleans its record and
// its key's list, unasked.
func TestTrimmedFromKilledInstanceCleaned(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	q, up := jobsQueueOn(t, c, nil)
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	id := enqueue(t, q, "jobs", "t", http.MethodPost, "/trimmed", []byte("t"))
	victim := startChild(t, srv.Addr, up.srv.URL, "deny")
	waitFor(t, "the victim to hold the request", 30*time.Second, func() bool { return pendingWith(t, c, "jobs", "victim") == 1 })
	if err := victim.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	victim.Wait()
	killedThenTrimmed(t, c, q, base, id, "t")
}

// killedThenTrimmed trims every entry of rule "jobs" from the stream
// (the victim, killed, holds id, of limiter key key), runs q, the
// survivor, and checks that its claim round cleans id's record, its key's
// list and the stream-id index.
func killedThenTrimmed(t *testing.T, c rueidis.Client, q *deferq.Queue, base, id, key string) {
	t.Helper()
	ctx := context.Background()
	if n, err := c.Do(ctx, c.B().Xtrim().Key(base+"q").Maxlen().Threshold("0").Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("XTRIM: %d, %v; want 1", n, err)
	}
	start(t, q)
	waitFor(t, "the survivor's claim round to drop the trimmed entry from the group", time.Minute, func() bool {
		return pendingWith(t, c, "jobs", "victim") == 0
	})
	for _, k := range []string{base + "s:" + id, base + "i"} {
		if n := exists(t, c, k); n != 0 {
			m, _ := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
			t.Errorf("%s after the survivor's claim round: %v, want none", k, m)
		}
	}
	if got := keyList(t, c, "jobs", key); len(got) != 0 {
		t.Errorf("key list after the survivor's claim round: %v, want none", got)
	}
}

func exists(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n
}

// A record written by a version before the key's list was named in it
// (no 'list' field) and before the stream-id index: read as queued; an
// instance of this version adds both; and once its holder
// is killed and it is trimmed away, a survivor's claim round cleans its
// record and its key's list as for a request queued by this version.
func TestOldRecordCleanedAfterTrim(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	q, up := jobsQueueOn(t, c, nil)
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	id := deferq.Tag("jobs") + "-0123456789abcdef0123"
	h := sha256.Sum256([]byte("old"))
	list := hex.EncodeToString(h[:10])
	// As the enqueue script of that version wrote them.
	sid, err := c.Do(ctx, c.B().Xadd().Key(base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", "old").
		FieldValue("method", "POST").FieldValue("uri", "/old").FieldValue("header", "{}").FieldValue("body", "o").
		FieldValue("at", "1700000000000").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []rueidis.Completed{
		c.B().Hset().Key(base+"s:"+id).FieldValue().FieldValue("state", "queued").FieldValue("rule", "jobs").FieldValue("sid", sid).
			FieldValue("at", "1700000000000").FieldValue("updated", "1700000000000").FieldValue("attempts", "0").Build(),
		c.B().Pexpire().Key(base + "s:" + id).Milliseconds(time.Hour.Milliseconds()).Build(),
		c.B().Rpush().Key(base + "k:" + list).Element(id).Build(),
	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := q.Status(ctx, id); err != nil || st.State != "queued" || st.Rule != "jobs" {
		t.Fatalf("Status of a record without a list field: %+v, %v; want queued, rule jobs", st, err)
	}
	victim := startChild(t, srv.Addr, up.srv.URL, "deny")
	// (Its start's scan of the stream adds them before it reads the
	// request: it must hold it too.)
	waitFor(t, "the victim to hold the request, its record's list added and the request indexed", 30*time.Second, func() bool {
		l, _ := c.Do(ctx, c.B().Hget().Key(base+"s:"+id).Field("list").Build()).ToString()
		x, _ := c.Do(ctx, c.B().Hget().Key(base+"i").Field(sid).Build()).ToString()
		return l == list && x == id && pendingWith(t, c, "jobs", "victim") == 1
	})
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	victim.Wait()
	killedThenTrimmed(t, c, q, base, id, "old")
}
