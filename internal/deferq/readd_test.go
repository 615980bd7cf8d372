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

// msgLog passes on the messages logged, at every level.
type msgLog chan string

func (h msgLog) Enabled(context.Context, slog.Level) bool { return true }
func (h msgLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h msgLog) WithGroup(string) slog.Handler            { return h }
func (h msgLog) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Message:
	default:
	}
	return nil
}

// A reload that removes a defer rule, then one that brings it back while
// the first's worker still has a send in flight, runs two workers of the
// rule in one instance for a while. The old one, done, let go of every
// entry pending with the instance's consumer, the new worker's too, a
// send of it in flight among them: its idle time set to claim_idle,
// another instance's next claim round took it and sent it again, while
// the first send was at the upstream. A worker lets go of its own.
func TestReloadReaddedKeepsNewWorkersEntries(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	type arrival struct {
		id     string
		answer chan struct{}
	}
	arrivals := make(chan arrival, 10)
	var held []chan struct{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := arrival{r.Header.Get("Idempotency-Key"), make(chan struct{})}
		arrivals <- a
		<-a.answer
	}))
	t.Cleanup(up.Close)
	defer func() { // before the queue's cleanup, which waits for sends in flight
		for _, ch := range held {
			close(ch)
		}
	}()
	log := make(msgLog, 10000)
	const claimIdle = 30 * time.Second
	q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.URL), ClaimIdle: claimIdle, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	rule := deferq.Rule{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		return sluice.Decision{Allowed: true}, nil
	}}
	q.SetRules([]deferq.Rule{rule})
	id1 := enqueue(t, q, "jobs", "k1", http.MethodPost, "/job", []byte("one"))
	start(t, q)
	arrived := func(want string) chan struct{} {
		t.Helper()
		select {
		case got := <-arrivals:
			if got.id != want {
				t.Fatalf("arrived %s, want %s", got.id, want)
			}
			return got.answer
		case <-time.After(time.Minute):
			t.Fatalf("%s did not reach the upstream within a minute", want)
		}
		return nil
	}
	answer1 := arrived(id1)
	q.SetRules(nil) // the old worker stops; its send of id1 runs on
	q.SetRules([]deferq.Rule{rule})
	id2 := enqueue(t, q, "jobs", "k2", http.MethodPost, "/job", []byte("two"))
	held = append(held, arrived(id2)) // sent by the new worker, held at the upstream
	close(answer1)
	timeout := time.After(time.Minute)
	for m := ""; m != "defer: released"; {
		select {
		case m = <-log:
		case <-timeout:
			t.Fatal("the old worker did not let go within a minute")
		}
	}
	arr, err := c.Do(context.Background(), c.B().Xpending().Key("sluice:defer:{"+deferq.Tag("jobs")+"}:q").Group("sluice").
		Start("-").End("+").Count(10).Build()).ToArray()
	if err != nil || len(arr) != 1 {
		t.Fatalf("XPENDING: %d entries, %v; want 1 (id2, in flight)", len(arr), err)
	}
	p, _ := arr[0].ToArray()
	idle, _ := p[2].AsInt64()
	if idle >= claimIdle.Milliseconds() {
		t.Errorf("id2, in flight with the new worker, idle %d ms after the old worker let go: another instance would claim it and send it again", idle)
	}
}
