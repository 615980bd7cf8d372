package deferq_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// wordLog passes on each record's message with its attributes, as text.
type wordLog chan string

func (h wordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h wordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h wordLog) WithGroup(string) slog.Handler            { return h }
func (h wordLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	select {
	case h <- b.String():
	default:
	}
	return nil
}

// A reload that removes a defer rule (or renames it, or changes its
// action) while requests are queued on it leaves them in Redis, unsent,
// until a defer rule of that name comes back; the queue-length metric no
// longer shows them either. That used to happen without a word: it is
// logged, a warning naming the rule and how many wait.
func TestRemovedRuleWithQueueWarns(t *testing.T) {
	srv := redistest.StartServer(t)
	log := make(wordLog, 1000)
	q, err := newQueue(deferq.Options{Client: client(t, srv.Addr), Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}, {Name: "empty"}})
	for range 2 {
		enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	}
	q.SetRules(nil)
	timeout := time.After(time.Minute)
	for {
		select {
		case m := <-log:
			if strings.Contains(m, "rule=empty") {
				t.Errorf("logged for a removed rule with nothing queued: %s", m)
			}
			if strings.HasPrefix(m, "WARN") && strings.Contains(m, "rule=jobs") {
				if !strings.Contains(m, "requests=2") {
					t.Errorf("warning %q; want requests=2", m)
				}
				return
			}
		case <-timeout:
			t.Fatal("no warning within a minute that the removed rule jobs leaves 2 requests queued")
		}
	}
}
