package deferq_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// An entry that is not a queued request (no id, or one that is not an id
// of this rule: written by hand, by another program, or damaged) goes to
// the dead-letter stream at once with an error saying so, and does not hold
// up the requests of its key. It used to be held for ever, waiting for a
// turn that never came, and with it every later request of its key on the
// instance that held it.
func TestMalformedEntryDeadLettered(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL),
		ClaimIdle: 3 * time.Second, DeliveryTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	base := "sluice:defer:{" + deferq.Tag("jobs") + "}:"
	ctx := context.Background()
	for _, id := range []string{"", "0123456789ab-0123456789abcdef0123"} { // none; another rule's
		fv := c.B().Xadd().Key(base+"q").Id("*").FieldValue().FieldValue("key", "k").FieldValue("method", "POST")
		if id != "" {
			fv = fv.FieldValue("id", id)
		}
		if err := c.Do(ctx, fv.Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/ok", []byte("ok"))
	start(t, q)
	select {
	case d := <-up.arrivals:
		if d.path != "/ok" {
			t.Errorf("delivered %s, want /ok", d.path)
		}
	case <-time.After(30 * time.Second): // a bound: it comes within a second
		st, err := q.Status(ctx, id)
		t.Fatalf("the request behind malformed entries never came: %+v, %v", st, err)
	}
	waitFor(t, "malformed entries dead-lettered and the stream empty", 10*time.Second, func() bool {
		n, _ := c.Do(ctx, c.B().Xlen().Key(base+"q").Build()).AsInt64()
		return n == 0
	})
	dead, err := c.Do(ctx, c.B().Xrange().Key(base+"dead").Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 {
		t.Fatalf("dead letters: %d, want the 2 malformed entries", len(dead))
	}
	for _, e := range dead {
		if !strings.Contains(e.FieldValues["error"], "malformed") || e.FieldValues["key"] != "k" {
			t.Errorf("dead letter %v: want the entry, with an error saying it is malformed", e.FieldValues)
		}
	}
	pending, err := c.Do(ctx, c.B().Xpending().Key(base+"q").Group("sluice").Start("-").End("+").Count(10).Build()).ToArray()
	if err != nil || len(pending) != 0 {
		t.Errorf("pending after all settled: %d entries, %v; want none", len(pending), err)
	}
}
