package deferq

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/redis/rueidis"
)

// The outcome of one send is recorded once even if finish.lua runs twice:
// when its reply is lost (a timeout, a dropped connection) after Redis ran
// it, the worker records the same outcome again on its next turn, and the
// attempt used to be counted twice (a request dead-lettered one send
// early). A second send, another instance's say, still counts.
func TestFinishOncePerSend(t *testing.T) {
	q, c := jobsQueue(t)
	r := httptest.NewRequest("POST", "/job", nil)
	ctx := context.Background()
	id, err := q.Enqueue(ctx, "jobs", []string{"k"}, r, r.Header, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	base := q.base(Tag("jobs"))
	// Read through the group, as a worker reads it: finish.lua records
	// the outcome of an entry pending in the group only.
	if err := c.Do(ctx, c.B().XgroupCreate().Key(base+"q").Group(group).Id("0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	rs, err := c.Do(ctx, c.B().Xreadgroup().Group(group, "a").Count(1).Streams().Key(base+"q").Id(">").Build()).AsXRead()
	es := rs[base+"q"]
	if err != nil || len(es) != 1 {
		t.Fatalf("XREADGROUP: %v, %d entries", err, len(es))
	}
	keys := []string{base + "q", base + "s:" + id, base + "k:" + keyDigest("k"), base + "dead", base + "i"}
	finish := func(send string) string { // back-off 1 s doubling up to 60 s; no wait from the upstream
		state, err := finishScript.Exec(ctx, c, keys, []string{group, es[0].ID, id, "failed", "503", "503 Service Unavailable",
			"3", "60000", "1000", "100", send, "60000", "0"}).ToString()
		if err != nil {
			t.Fatal(err)
		}
		return state
	}
	attempts := func() string {
		v, _ := c.Do(ctx, c.B().Hget().Key(keys[1]).Field("attempts").Build()).ToString()
		return v
	}
	for i := range 2 { // one send, recorded twice
		if st := finish("send-1"); st != "failed:1000" {
			t.Fatalf("record %d of send 1: %q, want failed:1000 (retry in 1 s)", i, st)
		}
	}
	if a := attempts(); a != "1" {
		t.Fatalf("attempts after one send recorded twice: %s, want 1", a)
	}
	if st := finish("send-2"); st != "failed:2000" || attempts() != "2" {
		t.Fatalf("a second send: %q, attempts %s; want failed:2000 (the back-off of a second attempt), 2", st, attempts())
	}
}

// An outcome recorded for a request trimmed from the stream while it was
// being sent, and dropped from the group meanwhile by a claim that met it
// (XAUTOCLAIM drops deleted entries, whoever holds them), is not
// recorded ('lost'): its record, which said it waits, goes with its place
// in its key's list and its stream-id index entry, rather than read
// "queued" until someone asked.
func TestFinishLostTrimmedForgets(t *testing.T) {
	q, c := jobsQueue(t)
	ctx := context.Background()
	base := q.base(Tag("jobs"))
	if err := c.Do(ctx, c.B().XgroupCreate().Key(base+"q").Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/job", nil)
	id, err := q.Enqueue(ctx, "jobs", []string{"k"}, r, r.Header, []byte("job"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.Do(ctx, c.B().Xreadgroup().Group(group, "a").Count(1).Streams().Key(base+"q").Id(">").Build()).AsXRead()
	es := rs[base+"q"]
	if err != nil || len(es) != 1 {
		t.Fatalf("XREADGROUP: %v, %d entries", err, len(es))
	}
	for _, cmd := range []rueidis.Completed{
		c.B().Xtrim().Key(base + "q").Maxlen().Threshold("0").Build(),
		c.B().Xautoclaim().Key(base + "q").Group(group).Consumer("other").MinIdleTime("0").Start("0-0").Build(),
	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{base + "q", base + "s:" + id, base + "k:" + keyDigest("k"), base + "dead", base + "i"}
	state, err := finishScript.Exec(ctx, c, keys, []string{group, es[0].ID, id, "delivered", "200", "",
		"3", "60000", "1000", "100", "send-1", "60000", "0"}).ToString()
	if err != nil || state != "lost" {
		t.Fatalf("finish.lua for a request trimmed and dropped from the group: %q, %v; want lost", state, err)
	}
	for _, k := range []string{keys[1], keys[2], keys[4]} {
		if n, err := c.Do(ctx, c.B().Exists().Key(k).Build()).AsInt64(); err != nil || n != 0 {
			t.Errorf("%s after finish.lua found its request lost: EXISTS %d, %v; want 0", k, n, err)
		}
	}
}
