package deferq_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A shutdown lets go of the requests the instance holds (waiting for the
// rule's limit or a retry): another instance takes them at its next claim
// round, rather than after claim_idle, which is for instances that die.
// They used to stay pending with the stopped instance, unsent, for a whole
// claim_idle (30 s by default).
func TestShutdownReleasesHeld(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	const claimIdle = time.Hour // no instance claims a silent one's requests within the test
	log := make(turnLog, 1000)
	var open atomic.Bool // the limit admits (b's turn)
	take := func(context.Context, []string) (sluice.Decision, error) {
		if open.Load() {
			return sluice.Decision{Allowed: true}, nil
		}
		return sluice.Decision{RetryAfter: time.Hour}, nil
	}
	a, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL), ClaimIdle: claimIdle, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	a.SetRules([]deferq.Rule{{Name: "jobs", Take: take}})
	id := enqueue(t, a, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	if v := nextVerdict(t, log, id); v != "ok" {
		t.Fatalf("a's turn: %q, want ok (a holds it, the limit says wait)", v)
	}
	cancel()
	<-done
	if n := pendingWith(t, c, "jobs", "a"); n != 1 {
		t.Fatalf("%d entries pending with a after its shutdown, want 1 (released, not acknowledged)", n)
	}

	open.Store(true)
	b, err := newQueue(deferq.Options{Client: c, Consumer: "b", Upstream: mustURL(t, up.srv.URL), ClaimIdle: claimIdle})
	if err != nil {
		t.Fatal(err)
	}
	b.SetRules([]deferq.Rule{{Name: "jobs", Take: take}})
	start(t, b)
	select {
	case d := <-up.arrivals:
		if d.idem != id {
			t.Errorf("delivered %q, want %q", d.idem, id)
		}
	case <-time.After(30 * time.Second): // a safety bound, far under claim_idle
		t.Fatalf("the request a held was not sent by b within 30s (claim_idle %v): a did not let it go at shutdown", claimIdle)
	}
}

// Once Run has returned, the connections the replays opened to the
// upstream are closed: the transport kept them idle (90 s, or as long as
// an upstream that never closes idle connections keeps them) after the
// queue had stopped.
func TestShutdownClosesUpstreamConnections(t *testing.T) {
	srv := redistest.StartServer(t)
	var open atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Upstream: mustURL(t, up.URL)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	awaitState(t, q, id, "delivered")
	if open.Load() == 0 {
		t.Fatal("no connection to the upstream open: the test would test nothing")
	}
	cancel()
	<-done
	waitFor(t, "the upstream connections closed after Run returned", 30*time.Second, func() bool { return open.Load() == 0 })
}
