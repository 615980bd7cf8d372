package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rules"
)

// A client that goes away while its request is held by action delay ends
// the wait on every engine, with or without a body: the request never
// reaches the upstream. HTTP/1.1 clients close their connection; an
// HTTP/2 client cancels its stream.
func TestEngineDelayClientGone(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, pa := range paths {
			t.Run(pa.name, func(t *testing.T) {
				var hits atomic.Int64
				up := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
				s := startOn(t, ec, up.srv.URL, engineOpts{specs: []rules.Spec{
					// The leaky bucket spaces requests a minute apart: the
					// second is held a minute, whenever it comes.
					{Name: "slow", Rate: "1/m", Action: "delay", MaxDelay: 2 * time.Minute, Algorithm: "leaky_bucket"},
				}})
				if resp, _ := s.do(t, request(t, s, pa.method, "/first", pa.body)); resp.StatusCode != 200 {
					t.Fatalf("first request: %d", resp.StatusCode)
				}
				leave := func() {}
				if ec.h2 {
					ctx, cancel := context.WithCancel(context.Background())
					req := request(t, s, pa.method, "/held", pa.body).WithContext(ctx)
					done := make(chan struct{})
					go func() { defer close(done); s.client.Do(req) }()
					leave = func() { cancel(); <-done }
				} else {
					c := s.dial(t)
					fmt.Fprintf(c, "%s /held HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", pa.method, len(pa.body), pa.body)
					leave = func() { c.Close() }
				}
				until(t, "the second request held", func() bool { return s.active.Load() == 1 })
				leave()
				until(t, "the held request ended after its client left", func() bool { return s.active.Load() == 0 })
				if n := hits.Load(); n != 1 {
					t.Errorf("upstream got %d requests; want 1 (the held one abandoned)", n)
				}
			})
		}
	})
}

// until spins until cond holds, failing after safety (the waits here are
// for goroutines to run, not for time to pass).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, safety)
		}
		runtime.Gosched()
	}
}
