package deferq_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// cancelAware is a real transport that, like any transport, fails a send
// whose context ended before the answer was read; it only makes that
// certain, where a real transport races the answer against the
// cancellation.
type cancelAware struct{ http.RoundTripper }

func (t cancelAware) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(r)
	if err == nil && r.Context().Err() != nil {
		resp.Body.Close()
		return nil, r.Context().Err()
	}
	return resp, err
}

// A shutdown while a request is at the upstream lets that send finish and
// records the upstream's answer. It used to cut the send off and record it
// as a failed attempt: on the last attempt (here the only one) the request
// was dead-lettered though the upstream had it, and otherwise it was sent
// again later.
func TestShutdownFinishesSendInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	arrived, hold := make(chan struct{}, 1), make(chan struct{})
	up := newUpstream(t, func(d delivery, n int) int {
		arrived <- struct{}{}
		<-hold
		return http.StatusCreated
	})
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Upstream: mustURL(t, up.srv.URL), MaxAttempts: 1,
		Transport: cancelAware{&http.Transport{}}})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	<-arrived
	cancel() // shutdown with the send at the upstream
	close(hold)
	<-done
	st, err := q.Status(context.Background(), id)
	if err != nil || st.State != "delivered" || st.Status != http.StatusCreated || st.Attempts != 1 {
		t.Errorf("Status after a shutdown during the send = %+v, %v; want delivered, 201, 1 attempt", st, err)
	}
	if _, byKey := up.snapshot(); byKey[id] != 1 {
		t.Errorf("%d arrivals, want 1", byKey[id])
	}
}
