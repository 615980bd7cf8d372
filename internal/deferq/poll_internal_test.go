package deferq

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// jobsQueue returns a Queue with the default options (but an
// EnqueueTimeout of a minute: 2 s is a deadline a loaded machine can
// miss) and one rule, jobs, on a Redis of its own, and its client.
func jobsQueue(t *testing.T) (*Queue, rueidis.Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	q, err := New(Options{Client: c, Upstream: &url.URL{Scheme: "http", Host: "upstream.test"}, EnqueueTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]Rule{{Name: "jobs"}})
	return q, c
}

// xreadgroups is how many XREADGROUP calls the server has run (read.lua's
// reads of new entries), from INFO commandstats.
func xreadgroups(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_xreadgroup:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// TestIdleReadBacksOff: a rule with nothing queued costs an instance
// about one read a second, not ten. Reads of new entries cannot block
// (they run in read.lua), so the reader waits after an empty one: 100 ms
// at first, then twice as long each time up to a second. Its sixth read
// can come no sooner than 100+200+400+800+1000 ms after its first (with a
// fixed 100 ms, 500 ms after); a loaded machine only makes it later.
func TestIdleReadBacksOff(t *testing.T) {
	q, c := jobsQueue(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Timed from before the first read can come: timed from when the
	// test saw the first, a correct back-off measured a few ms short.
	start := time.Now()
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := start.Add(time.Minute)
	for xreadgroups(t, c) < 6 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 6 reads within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(start); d < 2500*time.Millisecond {
		t.Errorf("6 reads of an idle rule within %v of its start, want at least 2.5 s (back-off to a second)", d)
	}
}

// TestEnqueueWakesReader: the reader waiting after an empty read is woken
// by a request this instance queues, instead of waiting out its back-off.
func TestEnqueueWakesReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &worker{kick: make(chan struct{}, 1)}
		start := time.Now()
		ok := make(chan bool)
		go func() { ok <- w.idle(context.Background(), time.Hour) }()
		synctest.Wait()
		w.wake()
		w.wake() // a second wake while one is pending does not block
		if !<-ok {
			t.Fatal("idle reported its context ended")
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("idle returned after %v, want at once on wake", d)
		}
	})

	q, _ := jobsQueue(t)
	w := newWorker(q, q.Rule("jobs"), q.o.Consumer)
	q.mu.Lock()
	q.workers["jobs"] = w // as Run would, without its reader
	q.mu.Unlock()
	r := httptest.NewRequest("POST", "/job", strings.NewReader("job"))
	if _, err := q.Enqueue(context.Background(), "jobs", []string{"k"}, r, r.Header, []byte("job")); err != nil {
		t.Fatal(err)
	}
	if len(w.kick) != 1 {
		t.Error("Enqueue did not wake the rule's reader")
	}
}
