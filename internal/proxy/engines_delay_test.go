package proxy_test

import (
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rules"
)

// A client that goes away while its request is held by action delay ends
// the wait on every HTTP/1.1 engine, with or without a body: the request
// never reaches the upstream.
func TestEngineDelayClientGone(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
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
				open := s.metric(t, "sluice_connections_open")
				c := s.dial(t)
				fmt.Fprintf(c, "%s /held HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", pa.method, len(pa.body), pa.body)
				deadline := time.Now().Add(safety)
				for s.metric(t, "sluice_connections_open") != open+1 { // until accepted
					if time.Now().After(deadline) {
						t.Fatal("the connection was not accepted")
					}
					runtime.Gosched()
				}
				c.Close()
				for s.metric(t, "sluice_connections_open") != open {
					if time.Now().After(deadline) {
						t.Fatal("the held request of a client that went away still holds its connection")
					}
					runtime.Gosched()
				}
				if n := hits.Load(); n != 1 {
					t.Errorf("upstream got %d requests; want 1 (the held one abandoned)", n)
				}
			})
		}
	})
}
