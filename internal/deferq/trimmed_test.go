package deferq_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request trimmed out of the stream before any instance read it (XTRIM
// MAXLEN by hand) is gone: nothing will send it. Its key's next request
// finds it gone and goes on (begin.lua drops it from the key's order),
// and its record goes with it: it used to read "queued" for 7 days.
func TestTrimmedRequestLeavesNoStatus(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	gone := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("1"))
	next := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("2"))
	stream := "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
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
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	ctx := context.Background()
	stream := "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
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
	waitFor(t, "the trimmed key's next request delivered", time.Minute, func() bool {
		st, err := q.Status(ctx, next)
		return err == nil && st.State == "delivered"
	})
}
