package deferq_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request trimmed out of the stream before any instance read it (XTRIM
// MAXLEN by hand) is gone: nothing will send it. Its key's next request
// finds it gone and goes on (begin.lua drops it from the key's order),
// and its record goes with it: it used to read "queued" for 7 days.
func TestTrimmedRequestLeavesNoStatus(t *testing.T) {
	c, q, up, stream := jobsQueue(t)
	gone := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("1"))
	next := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("2"))
	if n, err := c.Do(context.Background(), c.B().Xtrim().Key(stream).Maxlen().Threshold("1").Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("XTRIM: %d, %v; want 1 (the first request trimmed)", n, err)
	}
	start(t, q)
	select {
	case d := <-up.arrivals:
		if d.idem != next {
			t.Fatalf("delivered %s, want %s (the trimmed one is gone)", d.idem, next)
		}
	case <-time.After(time.Minute):
		t.Fatal("the key's next request not delivered within a minute: the trimmed one held its turn")
	}
	// Its key's next request, delivered, dropped it from the key's order,
	// and from the stream-id index: neither is left once both are settled.
	awaitState(t, q, next, "delivered")
	if n := exists(t, c, "sluice:defer:{"+deferq.Tag("jobs")+"}:i"); n != 0 {
		t.Errorf("stream-id index once the key's next request is delivered: %d keys, want none", n)
	}
	if st, err := q.Status(context.Background(), gone); !errors.Is(err, deferq.ErrUnknownID) {
		t.Errorf("status of the request trimmed away, once its key went on: %+v, %v; want ErrUnknownID", st, err)
	}
}

// The last request of its key trimmed or deleted from the stream by hand
// before any instance read it has no later request to find it gone: its
// record read "queued" until it expired, 7 days on, for a request nothing
// will send. GET /v1/deferred/ID answers 404 for it, as for a request
// Redis lost; one pending with a consumer (held: its holder sends it) and
// one still in the stream read "queued". The key's next request goes on.
func TestTrimmedLastRequestUnknown(t *testing.T) {
	c, q, _, stream := jobsQueue(t)
	ctx := context.Background()
	sid := func(id string) string {
		v, err := c.Do(ctx, c.B().Hget().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:s:"+id).Field("sid").Build()).ToString()
		if err != nil {
			t.Fatalf("HGET sid of %s: %v", id, err)
		}
		return v
	}
	if err := c.Do(ctx, c.B().XgroupCreate().Key(stream).Group("sluice").Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	held := enqueue(t, q, "jobs", "h", http.MethodPost, "/held", []byte("h"))
	if err := c.Do(ctx, c.B().Xreadgroup().Group("sluice", "holder").Count(1).Streams().Key(stream).Id(">").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	deleted := enqueue(t, q, "jobs", "d", http.MethodPost, "/deleted", []byte("d"))
	trimmed := enqueue(t, q, "jobs", "t", http.MethodPost, "/trimmed", []byte("t"))
	kept := enqueue(t, q, "jobs", "k", http.MethodPost, "/kept", []byte("k"))
	for _, id := range []string{held, deleted} {
		if err := c.Do(ctx, c.B().Xdel().Key(stream).Id(sid(id)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, c.B().Xtrim().Key(stream).Minid().Threshold(sid(kept)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id, want string
	}{
		{"held by a consumer, deleted from the stream", held, "queued"},
		{"deleted unread", deleted, ""},
		{"trimmed unread", trimmed, ""},
		{"in the stream", kept, "queued"},
	} {
		st, err := q.Status(ctx, tc.id)
		switch {
		case tc.want == "" && !errors.Is(err, deferq.ErrUnknownID):
			t.Errorf("Status of the request %s: %+v, %v; want ErrUnknownID (nothing will send it)", tc.name, st, err)
		case tc.want != "" && (err != nil || st.State != tc.want):
			t.Errorf("Status of the request %s: %+v, %v; want state %s", tc.name, st, err, tc.want)
		}
	}
	// Answered 404 once, it stays so; the key's next request goes on.
	if st, err := q.Status(ctx, trimmed); !errors.Is(err, deferq.ErrUnknownID) {
		t.Errorf("Status of the trimmed request, asked again: %+v, %v; want ErrUnknownID", st, err)
	}
	next := enqueue(t, q, "jobs", "t", http.MethodPost, "/next", []byte("n"))
	start(t, q)
	awaitState(t, q, next, "delivered")
}

// jobsQueue is a queue over a Redis of its own with the one rule "jobs"
// (no Take: each request goes at its turn), delivering to an upstream
// that records each request; stream is the rule's stream.
func jobsQueue(t *testing.T) (c rueidis.Client, q *deferq.Queue, up *upstream, stream string) {
	t.Helper()
	srv := redistest.StartServer(t)
	c = client(t, srv.Addr)
	q, up = jobsQueueOn(t, c, nil)
	return c, q, up, "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
}

// keyList returns the ids in the list of rule's requests queued under
// limiter key (sluice:defer:{T}:k:H), in order; none when it is gone.
func keyList(t *testing.T, c rueidis.Client, rule, key string) []string {
	t.Helper()
	h := sha256.Sum256([]byte(key))
	l, err := c.Do(context.Background(), c.B().Lrange().Key("sluice:defer:{"+deferq.Tag(rule)+"}:k:"+hex.EncodeToString(h[:10])).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("LRANGE of %s's key list: %v", key, err)
	}
	return l
}

// The last request of its key trimmed from the stream before any instance
// read it leaves its key's list once it is found gone. GET
// /v1/deferred/ID dropped its record and answered 404, but its id stayed
// in the list (which has no expiry, and which no later request came to
// clean): a key a day trimmed so was a list a day kept for ever. Found gone
// by Status here; a request of the key queued later goes at once.
func TestTrimmedLastRequestLeavesKeyList(t *testing.T) {
	c, q, _, stream := jobsQueue(t)
	ctx := context.Background()
	trimmed := enqueue(t, q, "jobs", "t", http.MethodPost, "/trimmed", []byte("t"))
	if got := keyList(t, c, "jobs", "t"); len(got) != 1 || got[0] != trimmed {
		t.Fatalf("key list after the enqueue: %v, want [%s]", got, trimmed)
	}
	if n, err := c.Do(ctx, c.B().Xtrim().Key(stream).Maxlen().Threshold("0").Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("XTRIM: %d, %v; want 1", n, err)
	}
	if st, err := q.Status(ctx, trimmed); !errors.Is(err, deferq.ErrUnknownID) {
		t.Fatalf("Status of the trimmed request: %+v, %v; want ErrUnknownID", st, err)
	}
	if got := keyList(t, c, "jobs", "t"); len(got) != 0 {
		t.Errorf("key list of a key whose one request was found trimmed away: %v, want none (deleted)", got)
	}
	if n := exists(t, c, "sluice:defer:{"+deferq.Tag("jobs")+"}:i"); n != 0 {
		t.Errorf("stream-id index once its one request was found trimmed away: %d keys, want none", n)
	}
	next := enqueue(t, q, "jobs", "t", http.MethodPost, "/next", []byte("n"))
	start(t, q)
	awaitState(t, q, next, "delivered")
	if got := keyList(t, c, "jobs", "t"); len(got) != 0 {
		t.Errorf("key list once its requests are delivered: %v, want none", got)
	}
}

// A request trimmed from the stream while an instance holds it, and then
// dropped from the group by another consumer's claim (XAUTOCLAIM drops
// the deleted entries it meets), is lost to its holder: its next turn
// finds it so, and takes its id out of its key's list, where it stayed
// for ever when no later request of the key came.
func TestTrimmedHeldRequestLeavesKeyList(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	log := make(turnLog, 1000)
	q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL), ClaimIdle: time.Hour,
		DeliveryTimeout: 10 * time.Minute, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{RetryAfter: 100 * time.Millisecond}, nil // held, never sent
	}}})
	ctx := context.Background()
	stream := "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
	id := enqueue(t, q, "jobs", "t", http.MethodPost, "/trimmed", []byte("t"))
	start(t, q)
	if v := nextVerdict(t, log, id); v != "ok" {
		t.Fatalf("a's first turn: %q, want ok (a holds it, the limit says wait)", v)
	}
	if n, err := c.Do(ctx, c.B().Xtrim().Key(stream).Maxlen().Threshold("0").Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("XTRIM: %d, %v; want 1", n, err)
	}
	if err := c.Do(ctx, c.B().Xautoclaim().Key(stream).Group("sluice").Consumer("other").MinIdleTime("0").Start("0-0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if n := pendingWith(t, c, "jobs", "a"); n != 0 {
		t.Fatalf("%d entries pending with a after XAUTOCLAIM met the trimmed one, want 0 (dropped from the group)", n)
	}
	for nextVerdict(t, log, id) != "lost" {
	}
	if got := keyList(t, c, "jobs", "t"); len(got) != 0 {
		t.Errorf("key list of a key whose one request its holder found lost (trimmed, gone from the group): %v, want none", got)
	}
	// Its record and its index entry go in the same step: nothing will
	// send it, and the record said "queued" until someone asked.
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	for _, k := range []string{base + "s:" + id, base + "i"} {
		if n := exists(t, c, k); n != 0 {
			m, _ := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
			t.Errorf("%s once its holder found its one request lost: %v, want none", k, m)
		}
	}
}
