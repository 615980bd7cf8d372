package deferq_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A 404 read for a request still queued whose record expired (it waited
// past the 7 days a queued record lasts) leaves a mark that stops a late
// enqueue of the id; the request itself, in the stream before the mark,
// is still delivered, and its record made again.
func TestExpiredRecordReadStillDelivered(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	q, up := jobsQueueOn(t, c, admitAll)
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	rec := "sluice:defer:{" + deferq.Tag("jobs") + "}:s:" + id
	if err := c.Do(context.Background(), c.B().Del().Key(rec).Build()).Error(); err != nil { // expired
		t.Fatal(err)
	}
	if _, err := q.Status(context.Background(), id); !errors.Is(err, deferq.ErrUnknownID) {
		t.Fatalf("Status(%s) of an expired record = %v; want ErrUnknownID", id, err)
	}
	start(t, q)
	select {
	case d := <-up.arrivals:
		if d.idem != id {
			t.Fatalf("delivered %s, want %s", d.idem, id)
		}
	case <-time.After(30 * time.Second): // a hang detector
		t.Fatalf("%s, queued, its record expired and read (404), never delivered", id)
	}
	awaitState(t, q, id, "delivered")
}

// When Redis cannot answer GET /v1/deferred/ID, the client gets a stable
// code and message, never Redis's error (which names keys, addresses, the
// server's state); the error goes to the log, with the id.
func TestStatusRedisErrorNotShown(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	var logged bytes.Buffer
	var connected atomic.Bool
	connected.Store(true)
	q, err := newQueue(deferq.Options{Connect: func() rueidis.Client {
		if connected.Load() {
			return c
		}
		return nil
	}, Upstream: mustURL(t, "http://127.0.0.1:1"), Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	id := deferq.Tag("jobs") + "-00000000000000000000"
	// A record Redis cannot read as one: HGETALL answers WRONGTYPE.
	rec := "sluice:defer:{" + deferq.Tag("jobs") + "}:s:" + id
	if err := c.Do(context.Background(), c.B().Set().Key(rec).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		connected bool
		inLog     string
	}{{"WRONGTYPE", true, "WRONGTYPE"}, {"not connected", false, "not connected"}} {
		connected.Store(tc.connected)
		logged.Reset()
		w := httptest.NewRecorder()
		q.ServeHTTP(w, httptest.NewRequest("GET", deferq.StatusPath+id, nil))
		const want = `{"error":"store_unavailable","message":"Redis could not be read; try again later"}` + "\n"
		if w.Code != http.StatusServiceUnavailable || w.Body.String() != want {
			t.Errorf("%s: GET %s: %d %q; want 503 %q", tc.name, id, w.Code, w.Body, want)
		}
		if got := w.Header().Get("Content-Type"); got != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.name, got)
		}
		if !strings.Contains(logged.String(), tc.inLog) || !strings.Contains(logged.String(), id) {
			t.Errorf("%s: log %q; want the error (%s) and the id", tc.name, logged.String(), tc.inLog)
		}
	}
}

// TestStatusErrorsLogOnceASecond: while Redis cannot answer, clients
// polling their deferred requests' status get 503 each, and the log gets
// one line a second per distinct error, with how many went unlogged: it
// once got one line per poll.
func TestStatusErrorsLogOnceASecond(t *testing.T) {
	var logged redistest.SyncBuffer
	var clock atomic.Int64
	clock.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	q, err := newQueue(deferq.Options{Connect: func() rueidis.Client { return nil },
		Upstream: mustURL(t, "http://127.0.0.1:1"), Logger: slog.New(slog.NewTextHandler(&logged, nil)),
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs"}})
	id := deferq.Tag("jobs") + "-00000000000000000000"
	get := func() {
		t.Helper()
		w := httptest.NewRecorder()
		q.ServeHTTP(w, httptest.NewRequest("GET", deferq.StatusPath+id, nil))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("GET %s without Redis: %d, want 503", id, w.Code)
		}
	}
	for range 10 {
		get()
	}
	if lines := logged.Lines(); len(lines) != 1 {
		t.Fatalf("10 polls in one second logged %d lines, want 1: %q", len(lines), lines)
	}
	clock.Add(int64(time.Second))
	get()
	if lines := logged.Lines(); len(lines) != 2 || !strings.Contains(lines[1], "suppressed=9") {
		t.Fatalf("a poll a second later: %d lines, want 2, the second with suppressed=9: %q", len(lines), lines)
	}
}

// GET /v1/deferred/ID while the Redis a queue was connected to is gone
// (stopped: connections refused) answers 503 once EnqueueTimeout has
// passed: it once waited for Redis for as long as the client did, the
// client library retrying the read without end.
func TestStatusRedisGoneAnswers503(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), EnqueueTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: admitAll}})
	id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	srv.Stop()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		q.ServeHTTP(w, httptest.NewRequest("GET", deferq.StatusPath+id, nil))
		done <- w
	}()
	select {
	case w := <-done:
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"store_unavailable"`) {
			t.Fatalf("GET %s with Redis stopped: %d %q; want 503 store_unavailable", id, w.Code, w.Body)
		}
	case <-time.After(time.Minute): // a hang detector
		t.Fatalf("GET %s with Redis stopped: no answer after a minute", id)
	}
}
