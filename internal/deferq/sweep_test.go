package deferq_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The claim rounds sweep the stream-id index for requests no claim will
// meet: one trimmed from the stream before any instance read it, the
// last of its key, goes with its record and its key's list, unasked (its
// record read "queued" for 7 days unless someone asked); an index entry
// of a request settled by an instance of an earlier version (which left
// the index as it was) goes, its record kept for its TTL. A request held
// by an instance, and one still in the stream, keep theirs.
func TestSweepForgetsRequestsGone(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	q, _ := jobsQueueOn(t, c, func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{RetryAfter: time.Hour}, nil // held, never sent
	})
	ctx := context.Background()
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	gone := enqueue(t, q, "jobs", "g", http.MethodPost, "/gone", []byte("g"))
	held := enqueue(t, q, "jobs", "h", http.MethodPost, "/held", []byte("h"))
	if err := c.Do(ctx, c.B().Xtrim().Key(base+"q").Minid().Threshold(sidOf(t, c, base, held)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waiting := enqueue(t, q, "jobs", "w", http.MethodPost, "/waiting", []byte("w"))
	settled := deferq.Tag("jobs") + "-0123456789abcdef0123"
	for _, cmd := range [][]string{
		{"HSET", base + "s:" + settled, "state", "delivered", "rule", "jobs", "sid", "1-1", "status", "200"},
		{"PEXPIRE", base + "s:" + settled, "3600000"},
		{"HSET", base + "i", "1-1", settled},
	} {
		if _, err := redistest.Do(srv.Addr, cmd...); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	keep := map[string]string{sidOf(t, c, base, held): held, sidOf(t, c, base, waiting): waiting}
	start(t, q)
	waitFor(t, "a claim round to sweep the index", time.Minute, func() bool {
		m, _ := c.Do(ctx, c.B().Hgetall().Key(base+"i").Build()).AsStrMap()
		return len(m) == len(keep)
	})
	m, err := c.Do(ctx, c.B().Hgetall().Key(base+"i").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	for sid, id := range keep {
		if m[sid] != id {
			t.Errorf("index after the sweep: %v; want %s -> %s kept (its request may still be sent)", m, sid, id)
		}
		if st, err := q.Status(ctx, id); err != nil || st.State != "queued" {
			t.Errorf("Status of a request still queued, after the sweep: %+v, %v; want queued", st, err)
		}
	}
	if n := exists(t, c, base+"s:"+gone); n != 0 {
		r, _ := c.Do(ctx, c.B().Hgetall().Key(base+"s:"+gone).Build()).AsStrMap()
		t.Errorf("record of the request trimmed unread, after the sweep: %v, want none", r)
	}
	if got := keyList(t, c, "jobs", "g"); len(got) != 0 {
		t.Errorf("key list of the request trimmed unread, after the sweep: %v, want none", got)
	}
	if st, err := c.Do(ctx, c.B().Hget().Key(base+"s:"+settled).Field("state").Build()).ToString(); err != nil || st != "delivered" {
		t.Errorf("record of a settled request whose index entry was swept: %q, %v; want delivered, kept for its TTL", st, err)
	}
}
