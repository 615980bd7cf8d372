package deferq_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// An instance whose record of an outcome failed (Redis unreachable for a
// moment) and that is stopped before its next turn records it as it
// stops. It used to forget it and let the request go: another instance
// claimed it at once, found it still queued, and sent it to the upstream
// a second time, though the first send had been delivered.
func TestStopRecordsPendingOutcome(t *testing.T) {
	srv := redistest.StartServer(t)
	gate := redistest.NewGate(t, srv.Addr)
	c := client(t, gate.Addr)
	direct := client(t, srv.Addr)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gate.Shut() // Redis unreachable when the outcome is to be recorded
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close)
	log := make(wordLog, 1000)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.URL), Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{Allowed: true}, nil
	}}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	timeout := time.After(time.Minute)
	for m := ""; !strings.Contains(m, "defer: record outcome"); {
		select {
		case m = <-log:
		case <-timeout:
			t.Fatal("no failed record within a minute")
		}
	}
	gate.Open()
	cancel() // stopped before the turn that records it again (a second on)
	<-done
	st, err := newQueue(deferq.Options{Client: direct})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := st.Status(context.Background(), id); err != nil || s.State != "delivered" {
		t.Errorf("Status(%s) after the stop = %+v, %v; want delivered: the upstream took it, and another instance would send it again", id, s, err)
	}
}
