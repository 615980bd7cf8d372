package deferq_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A Redis with persistence (appendonly yes, the README's advice) that
// crashes (SIGKILL) and comes back keeps every request it answered
// queued: those waiting in Redis and those an instance held in memory
// when it went (their entries pending with it), and every one is
// delivered once after the restart, by the instance that held it, without
// waiting for claim_idle.
func TestRedisCrashWithPersistence(t *testing.T) {
	srv := redistest.StartServerWith(t, "--appendonly", "yes") // appendfsync everysec, the default
	c := client(t, srv.Addr)
	up := newUpstream(t, nil)
	var open atomic.Bool
	q, err := newQueue(deferq.Options{Client: c, Upstream: mustURL(t, up.srv.URL), ClaimIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	q.SetRules([]deferq.Rule{{Name: "jobs", Take: func(context.Context, []string) (sluice.Decision, error) {
		if open.Load() {
			return sluice.Decision{Allowed: true}, nil
		}
		return sluice.Decision{RetryAfter: 50 * time.Millisecond}, nil
	}}})
	const n = 20
	ids := map[string]bool{}
	for i := range n {
		ids[enqueue(t, q, "jobs", "k"+strconv.Itoa(i%4), http.MethodPost, "/job", []byte(strconv.Itoa(i)))] = true
	}
	start(t, q)
	waitFor(t, "the instance holding every request", time.Minute, func() bool { return pending(c, "jobs") == n })
	srv.Kill()
	srv.Restart()
	open.Store(true)
	got := map[string]int{}
	timeout := time.After(time.Minute) // far under claim_idle: the holder sends them
	for len(got) < n {
		select {
		case d := <-up.arrivals:
			got[d.idem]++
			if !ids[d.idem] {
				t.Fatalf("delivered %q, never queued", d.idem)
			}
		case <-timeout:
			t.Fatalf("%d of %d requests delivered within a minute of Redis's restart", len(got), n)
		}
	}
	for id := range ids {
		awaitState(t, q, id, "delivered")
	}
	_, by := up.snapshot()
	for id := range ids {
		if by[id] != 1 {
			t.Errorf("%s reached the upstream %d times, want 1", id, by[id])
		}
	}
}
