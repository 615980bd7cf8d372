package deferq_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A 404 read for a request still queued whose record expired (it waited
// past the 7 days a queued record lasts) leaves a mark that stops a late
// enqueue of the id; the request itself, in the stream before the mark,
// is still delivered, and its record made again.
func TestExpiredRecordReadStillDelivered(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	q, err := deferq.New(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, string) (sluice.Decision, error) {
		return sluice.Decision{Allowed: true}, nil
	}}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	rec := "sluice:defer:{" + deferq.Tag("jobs") + "}:s:" + id
	if err := c.Do(context.Background(), c.B().Del().Key(rec).Build()).Error(); err != nil { // expired
		t.Fatal(err)
	}
	if _, err := q.Status(context.Background(), id); !errors.Is(err, deferq.ErrUnknownID) {
		t.Fatalf("Status(%s) of an expired record = %v; want ErrUnknownID", id, err)
	}
	start(t, q)
	select {
	case d := <-up.arrivals:
		if d.idem != id {
			t.Fatalf("delivered %s, want %s", d.idem, id)
		}
	case <-time.After(30 * time.Second): // a hang detector
		t.Fatalf("%s, queued, its record expired and read (404), never delivered", id)
	}
	waitFor(t, "status delivered", 10*time.Second, func() bool {
		st, err := q.Status(context.Background(), id)
		return err == nil && st.State == "delivered"
	})
}
