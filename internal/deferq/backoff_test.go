package deferq_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request whose send failed waits for its next_attempt_at (the back-off,
// here the upstream's Retry-After) also when another instance takes it
// over: the taker used to send it at once, as soon as it had claimed it.
func TestTakenOverRetryWaitsForNextAttempt(t *testing.T) {
	srv := redistest.StartServer(t)
	var mu sync.Mutex
	var sends []time.Time
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sends = append(sends, time.Now())
		n := len(sends)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(up.Close)
	c := client(t, srv.Addr)
	// The default timeouts (10 s delivery, 30 s claim idle) cost no time:
	// a, stopped, lets go of the entry and b claims it at its first round.
	// With a 400 ms delivery timeout, b's send answered 600 ms late on a
	// loaded machine was cut off and sent again: three sends.
	opts := func(consumer string) deferq.Options {
		return deferq.Options{Client: c, Consumer: consumer, Upstream: mustURL(t, up.URL)}
	}
	a, err := newQueue(opts("a"))
	if err != nil {
		t.Fatal(err)
	}
	a.SetRules([]deferq.Rule{{Name: "jobs"}})
	id := enqueue(t, a, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	st := awaitState(t, a, id, "failed")
	cancel() // a stops holding it
	<-done
	next, err := time.Parse(time.RFC3339Nano, st.NextAttempt)
	if err != nil {
		t.Fatalf("next_attempt_at %q: %v", st.NextAttempt, err)
	}
	b, err := newQueue(opts("b"))
	if err != nil {
		t.Fatal(err)
	}
	b.SetRules([]deferq.Rule{{Name: "jobs"}})
	start(t, b)
	awaitState(t, b, id, "delivered")
	mu.Lock()
	defer mu.Unlock()
	if len(sends) != 2 || sends[1].Before(next) {
		t.Errorf("sends at %v; want 2, the second not before next_attempt_at %v (Retry-After: 3)", sends, next)
	}
}

// The upstream's wait is read in each form a server sends it: Retry-After
// as seconds or as an HTTP date, or the RateLimit field's reset; the date
// form used to be ignored (a retry after the 1 s back-off).
func TestRetryAfterForms(t *testing.T) {
	srv := redistest.StartServer(t)
	c := client(t, srv.Addr)
	for _, tc := range []struct {
		name   string
		header func(now time.Time) (string, string)
	}{
		{"seconds", func(time.Time) (string, string) { return "Retry-After", "40" }},
		{"date", func(now time.Time) (string, string) {
			return "Retry-After", now.Add(41 * time.Second).UTC().Format(http.TimeFormat)
		}},
		{"ratelimit", func(time.Time) (string, string) { return "RateLimit", `"default";r=0;t=40` }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sentNs atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				now := time.Now()
				sentNs.Store(now.UnixNano())
				k, v := tc.header(now)
				w.Header().Set(k, v)
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			t.Cleanup(up.Close)
			q, err := newQueue(deferq.Options{Client: c, Consumer: tc.name, Upstream: mustURL(t, up.URL), Prefix: "retry-" + tc.name + ":"})
			if err != nil {
				t.Fatal(err)
			}
			q.SetRules([]deferq.Rule{{Name: "jobs"}})
			id := enqueue(t, q, "jobs", "k", http.MethodPost, "/job", []byte("job"))
			start(t, q)
			st := awaitState(t, q, id, "failed")
			next, err := time.Parse(time.RFC3339Nano, st.NextAttempt)
			if err != nil {
				t.Fatalf("next_attempt_at %q: %v", st.NextAttempt, err)
			}
			// The back-off alone would be 1 s; the server asked for 40.
			sent := time.Unix(0, sentNs.Load())
			if next.Before(sent.Add(39 * time.Second)) {
				t.Errorf("next_attempt_at %v, %v after the send; want at least 39 s (the server's wait)", next, next.Sub(sent))
			}
		})
	}
}

// A request taken over from a dead instance goes on with the back-off of
// its attempts so far (counted in Redis), not from the first step again:
// the taker used to count only the failures it had seen itself, so after
// three failed sends at the dead instance the fourth, the taker's, waited
// Backoff (10 ms here) instead of Backoff·2³ (80 ms).
func TestTakenOverBackoffContinues(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newUpstream(t, func(delivery, int) int { return http.StatusServiceUnavailable })
	c := client(t, srv.Addr)
	const backoff = 10 * time.Millisecond
	// run runs an instance that sends at most sends times, until it has.
	run := func(consumer string, sends int64) {
		t.Helper()
		var taken atomic.Int64
		q, err := newQueue(deferq.Options{Client: c, Consumer: consumer, Upstream: mustURL(t, up.srv.URL),
			MaxAttempts: 10, Backoff: backoff, MaxBackoff: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
			if taken.Add(1) > sends {
				return sluice.Decision{RetryAfter: time.Minute}, nil
			}
			return sluice.Decision{Allowed: true}, nil
		}}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { q.Run(ctx); close(done) }()
		for range sends {
			select {
			case <-up.arrivals:
			case <-time.After(time.Minute):
				t.Fatalf("%s: no send within a minute", consumer)
			}
		}
		cancel()
		<-done // the outcome of the last send is recorded
	}
	a, err := newQueue(deferq.Options{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	a.SetRules([]deferq.Rule{{Name: "jobs"}})
	id := enqueue(t, a, "jobs", "k", http.MethodPost, "/job", []byte("job"))
	run("a", 3)
	if st, err := a.Status(context.Background(), id); err != nil || st.Attempts != 3 {
		t.Fatalf("after a's sends: %+v, %v; want 3 attempts", st, err)
	}
	// a is dead: its entry has been idle for an hour, b claims it at once.
	stream := "sluice:defer:{" + deferq.Tag("jobs") + "}:q"
	es, err := c.Do(context.Background(), c.B().Xrange().Key(stream).Start("-").End("+").Build()).AsXRange()
	if err != nil || len(es) != 1 {
		t.Fatalf("XRANGE = %v, %v; want the one entry", es, err)
	}
	if err := c.Do(context.Background(), c.B().Arbitrary("XCLAIM").Keys(stream).Args("sluice", "a", "0", es[0].ID, "IDLE", "3600000", "JUSTID").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	run("b", 1)
	st, err := a.Status(context.Background(), id)
	if err != nil || st.State != "failed" || st.Attempts != 4 {
		t.Fatalf("after b's send: %+v, %v; want failed, 4 attempts", st, err)
	}
	updated, err1 := time.Parse(time.RFC3339Nano, st.Updated)
	next, err2 := time.Parse(time.RFC3339Nano, st.NextAttempt)
	if err1 != nil || err2 != nil {
		t.Fatalf("updated_at %q, next_attempt_at %q: %v, %v", st.Updated, st.NextAttempt, err1, err2)
	}
	if got, want := next.Sub(updated), backoff<<3; got != want {
		t.Errorf("back-off after the 4th failed send (b's, taken over from a): %v, want %v (Backoff·2³)", got, want)
	}
}
