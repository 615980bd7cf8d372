package daemon

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkCheckFleetLoopback is a whole /v1/check round trip over
// loopback through a running daemon on a real Redis, one hot key, for
// each fleet mode of a token bucket (plain: one script per decision;
// sync: 100ms; lease: auto), from a minimal keep-alive HTTP/1.1 client
// (net/http's client would cost about as much as the server). Run with
// -cpuprofile to see where the server's time goes:
//
//	go test ./internal/daemon -run '^$' -bench CheckFleetLoopback -cpu 2 -cpuprofile cpu.out
func BenchmarkCheckFleetLoopback(b *testing.B) {
	rs := redistest.StartServer(b)
	for _, mode := range []struct{ name, opt string }{{"plain", ""}, {"sync", "    sync: 100ms\n"}, {"lease", "    lease: auto\n"}} {
		b.Run(mode.name, func(b *testing.B) {
			td := startDaemon(b, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s]}
rules:
  - name: bench
    rate: 100000000/s
    algorithm: token_bucket
%s`, rs.Addr, mode.opt))
			addr := strings.TrimPrefix(td.api, "http://")
			body := `{"rule":"bench","key":"k"}`
			req := []byte("POST /v1/check HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
			b.ReportAllocs()
			// 64 connections at -cpu 2.
			benchutil.Clients(b, addr, 32, func() []byte { return req }, func(answer []byte) bool {
				return bytes.Contains(answer, []byte(`"allowed":true`))
			})
		})
	}
}
