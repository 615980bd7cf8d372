package deferq_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// When Redis loses its data (a restart without persistence) while an
// instance holds a request, the instance lets the request go without
// leaving a status behind: a turn used to write the missing record back
// as "queued", with no expiry, before it found the request gone, so
// GET /v1/deferred/ID said "queued" for ever.
func TestRedisDataLostLeavesNoStatus(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	log := make(turnLog, 1000)
	q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL),
		ClaimIdle: 3 * time.Second, DeliveryTimeout: time.Second, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{RetryAfter: 200 * time.Millisecond}, nil // held: the limit never admits it
	}}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	start(t, q)
	if v := nextVerdict(t, log, id); v != "ok" {
		t.Fatalf("first turn: %q, want ok (held, the limit says wait)", v)
	}
	if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for v := nextVerdict(t, log, id); v != "lost"; v = nextVerdict(t, log, id) {
		// Errors (the group is gone until the reader makes it again).
	}
	if _, err := q.Status(context.Background(), id); !errors.Is(err, deferq.ErrUnknownID) {
		st, _ := q.Status(context.Background(), id)
		t.Errorf("status after the data was lost and the request let go: %+v, %v; want ErrUnknownID", st, err)
	}
}
