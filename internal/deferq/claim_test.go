package deferq_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// turnLog passes on the verdicts of replay turns ("defer: turn" at debug
// level): id and verdict.
type turnLog chan [2]string

func (h turnLog) Enabled(context.Context, slog.Level) bool { return true }
func (h turnLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h turnLog) WithGroup(string) slog.Handler            { return h }
func (h turnLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "defer: turn" {
		return nil
	}
	var id, verdict string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "id":
			id = a.Value.String()
		case "verdict":
			verdict = a.Value.String()
		}
		return true
	})
	h <- [2]string{id, verdict}
	return nil
}

// nextVerdict waits for the next turn on id and returns its verdict.
func nextVerdict(t *testing.T, log turnLog, id string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case v := <-log:
			if v[0] == id {
				return v[1]
			}
		case <-timeout:
			t.Fatalf("no turn on %s within a minute", id)
		}
	}
}

// keepMine claims an entry again for consumer, as a live instance keeps
// what it holds, if it is still that consumer's.
var keepMine = rueidis.NewLuaScript(`
local p = redis.call('XPENDING', KEYS[1], 'sluice', ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[1] then
  redis.call('XCLAIM', KEYS[1], 'sluice', ARGV[1], 0, ARGV[2], 'JUSTID')
end
return 0`)

// An instance never takes back a request another instance has claimed
// from it (as one does when the holder was silent past claim_idle: a
// partition, a pause). Its heartbeat used to claim every entry it held
// again, whoever held it now, so once the silence ended both instances
// passed the ownership check of a turn and both could send the request.
func TestHeldEntryClaimedByAnotherStaysThere(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	log := make(turnLog, 1000)
	var taken atomic.Bool // the request has been claimed by b: the limit admits it
	q, err := newQueue(deferq.Options{Client: c, Consumer: "a", Upstream: mustURL(t, up.srv.URL),
		ClaimIdle: 3 * time.Second, DeliveryTimeout: time.Second, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		if taken.Load() {
			return sluice.Decision{Allowed: true}, nil
		}
		return sluice.Decision{RetryAfter: 2 * time.Second}, nil // a turns again after its heartbeat (every 1s)
	}}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	start(t, q)
	if v := nextVerdict(t, log, id); v != "ok" {
		t.Fatalf("a's first turn: %q, want ok (a holds it, the limit says wait)", v)
	}
	stream := "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
	es, err := c.Do(context.Background(), c.B().Xrange().Key(stream).Start("-").End("+").Build()).AsXRange()
	if err != nil || len(es) != 1 {
		t.Fatalf("XRANGE = %v, %v; want the one entry", es, err)
	}
	sid := es[0].ID
	// b takes it over and, alive, keeps it claimed while it holds it.
	if err := c.Do(context.Background(), c.B().Xclaim().Key(stream).Group("sluice").Consumer("b").MinIdleTime("0").Id(sid).Justid().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	taken.Store(true)
	stop := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				keepMine.Exec(context.Background(), c, []string{stream}, []string{"b", sid})
			}
		}
	}()
	defer func() { close(stop); <-kept }()
	if v := nextVerdict(t, log, id); v != "lost" {
		t.Errorf("a's turn after b claimed the request: %q, want lost (a took it back and may send it while b holds it)", v)
	}
	if owner := pendingWith(t, c, "jobs", "b"); owner != 1 {
		t.Errorf("%d entries pending with b, want 1 (b's, untouched)", owner)
	}
}
