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
	q, err := deferq.New(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL)})
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
