package daemon

import (
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestReloadsLeaveNothing: reloads that change every part a reload
// rebuilds — the rules (new and removed sync intervals, lease chunks,
// defer queues, sharded rules), the proxy's upstream, the TLS
// certificate, the token — leave no goroutine or descriptor behind: after
// 30 of them the daemon holds what it held after 3.
func TestReloadsLeaveNothing(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	ca := tlstest.NewCA(t, "server")
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	pairs := []tlstest.Pair{ca.Server(t), ca.Server(t)}
	putPair := func(i int) {
		p := pairs[i%2]
		replace(t, cert, read(t, p.CertFile))
		replace(t, key, read(t, p.KeyFile))
	}
	putPair(0)
	mustWrite(t, filepath.Join(dir, "ratelimit.yaml"), envoyDescriptors)
	token := filepath.Join(dir, "tok")
	mustWrite(t, token, "t0\n")
	cfg := func(i int) string {
		return fmt.Sprintf(`listen: 127.0.0.1:0
api: {token_file: %s, tls: {cert: %s, key: %s}}
proxy: {listen: 127.0.0.1:0, upstream: http://127.0.0.1:%d}
grpc: {listen: 127.0.0.1:0, config: [ratelimit.yaml]}
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - {name: soft%d, rate: 1000/d, algorithm: fixed_window, sync: %dms}
  - {name: hard%d, rate: 1000/d, algorithm: fixed_window, lease: %d}
  - {name: d%d, rate: 1/s, action: defer}
  - {name: auto, rate: 1000/d, shards: auto}
`, token, cert, key, 1+i%2, rs.Addr, i, 50+i, i, 5+i, i)
	}
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, cfg(0))
	td := startDaemonFile(t, path)
	go func() { // Reload is waited for here: its reports are not
		for range td.reloads {
		}
	}()
	round := func(i int) {
		mustWrite(t, path, cfg(i))
		if err := td.d.Reload(); err != nil {
			t.Fatal(err)
		}
		putPair(i)
		td.d.reloadCerts()
		mustWrite(t, token, fmt.Sprintf("t%d\n", i))
		if err := td.d.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		round(i)
	}
	g, fds := runtime.NumGoroutine(), openFDs(t)
	for i := 4; i <= 30; i++ {
		round(i)
	}
	settled(t, "after 27 more reloads", g, fds)
}

// TestRedisBouncesLeaveNothing: Redis going away and coming back, again
// and again, under a daemon with every kind of fleet rule, leaves no
// goroutine or descriptor behind (reconnections, the fallback's probe,
// sync batches and leases that failed), for on_error allow and local.
func TestRedisBouncesLeaveNothing(t *testing.T) {
	// Its fixed windows count in days since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, 24*time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	for _, onError := range []string{"allow", "local"} {
		t.Run(onError, func(t *testing.T) {
			td := startDaemon(t, `listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: http://127.0.0.1:1}
store:
  type: redis
  on_error: `+onError+`
  redis: {addrs: [`+rs.Addr+`], timeout: 200ms}
rules:
  - {name: soft, rate: 1000/d, algorithm: fixed_window, sync: 50ms}
  - {name: hard, rate: 1000/d, algorithm: fixed_window, lease: 10}
  - {name: plain, rate: 1000/d}
  - {name: later, rate: 1/s, action: defer}
`)
			round := func() {
				for _, r := range []string{"soft", "hard", "plain"} {
					check(t, td.api, r, "k", 1)
				}
				rs.Stop()
				for _, r := range []string{"soft", "hard", "plain"} {
					check(t, td.api, r, "k", 1)
				}
				rs.Restart()
				waitFor(t, "/readyz 200 with Redis back", func() bool { return get(t, td.api+"/readyz").status == http.StatusOK })
			}
			idle := http.DefaultTransport.(*http.Transport) // the test's client's
			for range 2 {
				round()
			}
			idle.CloseIdleConnections()
			g, fds := runtime.NumGoroutine(), openFDs(t)
			for range 6 {
				round()
			}
			idle.CloseIdleConnections()
			// Slack of one Redis connection more (two goroutines, and a
			// descriptor) and a pooled one: the clients redial lazily,
			// and the one for lone calls keeps as many connections as
			// calls were once concurrent. A leak per bounce shows 6.
			settled(t, "after 6 more times Redis went away and came back", g+2, fds+2)
		})
	}
}
