package deferq_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// recordLog passes on the outcomes recorded ("defer: recorded" at debug
// level): id and state.
type recordLog chan [2]string

func (h recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h recordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordLog) WithGroup(string) slog.Handler            { return h }
func (h recordLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "defer: recorded" {
		return nil
	}
	var id, state string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "id":
			id = a.Value.String()
		case "state":
			state = a.Value.String()
		}
		return true
	})
	select {
	case h <- [2]string{id, state}:
	default:
	}
	return nil
}

// When Redis loses its data (a restart without persistence) while a send
// is at the upstream, and the upstream fails it, the request is gone:
// nothing will try it again. Recording the failure used to make its record
// anew, "failed", with no expiry: GET /v1/deferred/ID said it would be
// tried again, for ever, and the record never left Redis. The outcome of
// a request no longer pending is not recorded.
func TestRedisDataLostInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	arrived, answer := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived) // one send only: a second would panic
		<-answer
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(up.Close)
	log := make(recordLog, 10)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.URL), Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{Allowed: true}, nil
	}}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	start(t, q)
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the request never reached the upstream")
	}
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	close(answer)
	select {
	case got := <-log:
		if got[0] != id {
			t.Fatalf("recorded %v, want the outcome of %s", got, id)
		}
	case <-time.After(time.Minute):
		t.Fatal("no outcome recorded within a minute")
	}
	key := deferq.DefaultPrefix + "{" + deferq.Tag("jobs") + "}:s:" + id
	m, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) > 0 {
		ttl, _ := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
		t.Errorf("record of a request lost with Redis's data, after its send failed: %v (PTTL %d ms); want none: nothing will try it again", m, ttl)
	}
}
