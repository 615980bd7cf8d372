package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

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
			b.SetParallelism(32) // 64 connections at -cpu 2
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for pb.Next() {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						return
					}
					if err := readAllowed(br); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// readAllowed reads one HTTP/1.1 answer with a Content-Length and checks
// that it allowed.
func readAllowed(br *bufio.Reader) error {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	body, err := br.Peek(n)
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte(`"allowed":true`)) {
		return fmt.Errorf("answer %q", body)
	}
	_, err = br.Discard(n)
	return err
}
