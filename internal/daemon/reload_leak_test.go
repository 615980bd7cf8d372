package daemon

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestReloadsLeaveNothing: reloads that change every part a reload
// rebuilds — the rules (new and removed sync intervals, lease chunks,
// defer queues, sharded rules), the proxy's upstream, the TLS
// certificate, the token — leave no goroutine or descriptor behind: after
// 30 of them the daemon holds what it held after 3.
func TestReloadsLeaveNothing(t *testing.T) {
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
