package deferq_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Enqueues whose reply is lost (a Redis that times out) log one line a
// second, with how many were left out, as the other failures to defer:
// each used to log its own, a line per over-limit request while Redis was
// slow.
func TestEnqueueReplyLostLoggedOnceASecond(t *testing.T) {
	srv := redistest.StartServer(t)
	var logged redistest.SyncBuffer
	var clock atomic.Int64
	clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	// As TestEnqueueRedisStuck: the client keeps its connection to a
	// stopped Redis; each ask gives up after EnqueueTimeout.
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true,
		ForceSingleClient: true, ConnWriteTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	warmUp(t, c)
	q, err := newQueue(deferq.Options{Client: c, Logger: slog.New(slog.NewTextHandler(&logged, nil)),
		EnqueueTimeout: 10 * time.Millisecond, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	if err := syscall.Kill(srv.PID(), syscall.SIGSTOP); err != nil { // no reply comes
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(srv.PID(), syscall.SIGCONT) })
	enq := func() {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/job", strings.NewReader("job"))
		var unknown *deferq.OutcomeUnknownError
		if _, err := q.Enqueue(context.Background(), "jobs", []string{"k"}, r, r.Header, []byte("job")); !errors.As(err, &unknown) {
			t.Fatalf("Enqueue with no reply = %v, want an *OutcomeUnknownError", err)
		}
	}
	logtest.OncePerSecond(t, "lost replies", "reply lost", 10, logged.Lines, enq, func() { clock.Add(int64(time.Second)) })
}

// Requests dead-lettered (an upstream down, every attempt failing) log one
// line a second with the count left out: each used to log its own, a line
// per request at the rule's rate for as long as the upstream was down.
func TestDeadLettersLoggedOnceASecond(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, func(delivery, int) int { return http.StatusInternalServerError })
	var logged redistest.SyncBuffer
	frozen := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Upstream: mustURL(t, up.srv.URL), MaxAttempts: 1,
		Logger: slog.New(slog.NewTextHandler(&logged, nil)), Now: func() time.Time { return frozen }})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	var ids []string
	for i := range 5 {
		ids = append(ids, enqueue(t, q, "jobs", "k"+string(rune('a'+i)), http.MethodPost, "/job", []byte("job")))
	}
	start(t, q)
	for _, id := range ids {
		awaitState(t, q, id, "dead_lettered")
	}
	n := 0
	for _, l := range logged.Lines() {
		if strings.Contains(l, "dead-lettered") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("5 requests dead-lettered within one second of the clock logged %d lines, want 1: %q", n, logged.Lines())
	}
}
