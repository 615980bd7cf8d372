package deferq_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A client that leaves while its request is being queued (a sender that
// does not wait for the answer) does not make the outcome unknown. Its
// enqueue, once sent, runs to its reply, bounded by EnqueueTimeout, so
// that Enqueue knows and says the request is queued (it is, and will be
// replayed); one that has left before anything was sent is not queued,
// and Enqueue says the client is gone. Both used to be an
// *OutcomeUnknownError, counted as result "unknown" and logged as a reply
// of Redis lost: the asks were cut off with the client's context.
func TestEnqueueClientGone(t *testing.T) {
	srv := redistest.StartServer(t)
	x := redistest.NewHolder(t, srv.Addr, "gone-key")
	c := x.Client(t)
	warmUp(t, c)
	q, err := newQueue(deferq.Options{Client: c, EnqueueTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	var unknown *deferq.OutcomeUnknownError
	stream := "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
	xlen := func() int64 {
		n, err := c.Do(context.Background(), c.B().Xlen().Key(stream).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
	if _, err := q.Enqueue(gone, "jobs", []string{"k"}, r, r.Header, []byte("job")); errors.As(err, &unknown) || !errors.Is(err, context.Canceled) {
		t.Errorf("Enqueue for a client gone before it = %v; want context.Canceled (not queued), not an unknown outcome", err)
	}
	if n := xlen(); n != 1 {
		t.Errorf("XLEN = %d, want 1 (the warm-up only)", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x.Hold()
	type answer struct {
		id  string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/job", bytes.NewReader([]byte("job")))
		id, err := q.Enqueue(ctx, "jobs", []string{"gone-key"}, r, r.Header, []byte("job"))
		done <- answer{id, err}
	}()
	select {
	case <-x.Held():
	case <-time.After(time.Minute):
		t.Fatal("the enqueue never reached Redis")
	}
	cancel() // the client leaves while its enqueue is on its way
	x.Release()
	var a answer
	select {
	case a = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Enqueue still waiting a minute after its reply was let through")
	}
	if a.err != nil {
		t.Fatalf("Enqueue whose client left mid-way = %v; want the id: the request was sent, and is queued", a.err)
	}
	if st, err := q.Status(context.Background(), a.id); err != nil || st.State != "queued" {
		t.Errorf("Status(%s) = %+v, %v; want queued", a.id, st, err)
	}
}
