package deferq_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A malformed entry (its list of other keys unreadable) whose id is a
// request's of the rule, with its record and its place in its key's
// list, is dead-lettered, and its record says so: state dead_lettered,
// the error, kept for the status TTL, its id out of its key's list. Its
// record used to read "queued" until someone asked, and then 404, as a
// request lost: the client was never told it was dead-lettered. The same
// for a record written before its key's list was named in it. A sweep of
// the index after leaves the outcome as it is.
func TestMalformedRealIDReadsDeadLettered(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), ClaimIdle: 3 * time.Second,
		DeliveryTimeout: time.Second, StatusTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	ctx := context.Background()
	ids := map[string]string{ // id -> its limiter key
		deferq.Tag("jobs") + "-0123456789abcdef0123": "k",   // record with its key's list named
		deferq.Tag("jobs") + "-3210fedcba9876543210": "old", // record from before it was
	}
	for id, key := range ids {
		writeRequest(t, c, base, id, key, key == "k", "also", "[not json")
	}
	// A damaged entry of a megabyte: its error quotes a bounded part.
	big := deferq.Tag("jobs") + "-00000000000000000b16"
	writeRequest(t, c, base, big, "big", true, "also", "["+strings.Repeat("x", 1<<20))
	start(t, q)
	if st := awaitState(t, q, big, "dead_lettered"); len(st.Error) > 256 || !strings.Contains(st.Error, "malformed entry: keys") {
		t.Errorf("Status of a damaged entry of a megabyte: error of %d bytes (%.80q…); want the reason in 256 at most", len(st.Error), st.Error)
	}
	for id, key := range ids {
		st := awaitState(t, q, id, "dead_lettered")
		if !strings.Contains(st.Error, "malformed entry: keys") || st.Attempts != 0 || st.Rule != "jobs" || st.Updated == "" {
			t.Errorf("Status(%s) = %+v; want dead_lettered, error malformed entry: keys …, no attempt", id, st)
		}
		if got := keyList(t, c, "jobs", key); len(got) != 0 {
			t.Errorf("key list of %s, dead-lettered: %v; want none", key, got)
		}
		ttl, err := c.Do(ctx, c.B().Pttl().Key(base+"s:"+id).Build()).AsInt64()
		if err != nil || ttl <= 0 || ttl > time.Hour.Milliseconds() {
			t.Errorf("TTL of the record of %s: %d ms, %v; want the status TTL (an hour at most)", id, ttl, err)
		}
	}
	if n := exists(t, c, base+"i"); n != 0 {
		m, _ := c.Do(ctx, c.B().Hgetall().Key(base+"i").Build()).AsStrMap()
		t.Errorf("stream-id index after the entries were dead-lettered: %v; want none", m)
	}
	// An index entry of a request gone, which only a sweep removes: once
	// it is gone, a sweep ran after the dead-lettering.
	if err := c.Do(ctx, c.B().Hset().Key(base+"i").FieldValue().FieldValue("1-1", deferq.Tag("jobs")+"-ffffffffffffffffffff").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sweep of the index", time.Minute, func() bool { return exists(t, c, base+"i") == 0 })
	for id := range ids {
		if st, err := q.Status(ctx, id); err != nil || st.State != "dead_lettered" {
			t.Errorf("Status(%s) after a sweep: %+v, %v; want dead_lettered still", id, st, err)
		}
	}
	if got, _ := up.snapshot(); len(got) != 0 {
		t.Errorf("%d deliveries, want none", len(got))
	}
}

// writeRequest writes request id of limiter key as the enqueue script
// does (the entry, its record, its place in its key's list, its index
// entry), with extra fields on the entry; withList false writes what an
// earlier version wrote: no 'list' in the record, no index entry. It
// returns the entry's id.
func writeRequest(t *testing.T, c rueidis.Client, base, id, key string, withList bool, extra ...string) string {
	t.Helper()
	ctx := context.Background()
	fv := c.B().Xadd().Key(base+"q").Id("*").FieldValue().FieldValue("id", id).FieldValue("key", key).
		FieldValue("method", "POST").FieldValue("uri", "/"+key).FieldValue("header", "{}").FieldValue("body", key).
		FieldValue("at", "1700000000000")
	for i := 0; i+1 < len(extra); i += 2 {
		fv = fv.FieldValue(extra[i], extra[i+1])
	}
	sid, err := c.Do(ctx, fv.Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(key))
	list := hex.EncodeToString(h[:10])
	rec := c.B().Hset().Key(base+"s:"+id).FieldValue().FieldValue("state", "queued").FieldValue("rule", "jobs").FieldValue("sid", sid).
		FieldValue("at", "1700000000000").FieldValue("updated", "1700000000000").FieldValue("attempts", "0")
	if withList {
		rec = rec.FieldValue("list", list)
	}
	cmds := []rueidis.Completed{
		rec.Build(),
		c.B().Pexpire().Key(base + "s:" + id).Milliseconds((7 * 24 * time.Hour).Milliseconds()).Build(),
		c.B().Rpush().Key(base + "k:" + list).Element(id).Build(),
	}
	if withList {
		cmds = append(cmds, c.B().Hset().Key(base+"i").FieldValue().FieldValue(sid, id).Build())
	}
	for _, cmd := range cmds {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return sid
}
