package daemon

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/benchutil"
)

// BenchmarkForwardAuthDaemon is /v1/forward-auth as nginx's auth_request
// asks it (examples/gateways/nginx, as make bench-gateway runs it):
// through a running daemon's decision API listener on the example's
// sluice.yaml (limits nobody reaches), logging at warn, each question a
// new request on a keep-alive connection, from raw clients that allocate
// nothing, so allocs/op, cpu-ns/op and -cpuprofile are mostly the
// daemon's (the client's reads and writes are in cpu-ns/op too).
func BenchmarkForwardAuthDaemon(b *testing.B) {
	yaml, err := os.ReadFile(filepath.Join("..", "..", "examples", "gateways", "nginx", "sluice.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	y := strings.NewReplacer("listen: 127.0.0.1:8080", "listen: 127.0.0.1:0", "rate: 100/m", "rate: 1000000000/s", "rate: 5/m", "rate: 1000000000/s").Replace(string(yaml))
	if !strings.Contains(y, "listen: 127.0.0.1:0") || strings.Contains(y, "/m\n") {
		b.Fatalf("the example's sluice.yaml changed: %s", y)
	}
	path := filepath.Join(b.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		b.Fatal(err)
	}
	td := startDaemonWith(b, path, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	// What nginx sends (proxy_set_header in sluice.conf; the client's own
	// headers, here wrk's Host, passed on).
	reqs := make([][]byte, 250)
	for i := range reqs {
		reqs[i] = []byte("GET /v1/forward-auth HTTP/1.1\r\n" +
			"X-Forwarded-Method: GET\r\n" +
			"X-Forwarded-Uri: /items?page=1\r\n" +
			"X-Forwarded-Host: 127.0.0.1:8000\r\n" +
			"X-Forwarded-For: 198.51.100." + strconv.Itoa(i) + "\r\n" +
			"Host: sluice\r\n" +
			"User-Agent: wrk\r\n" +
			"Accept: */*\r\n\r\n")
	}
	addr := strings.TrimPrefix(td.api, "http://")
	b.Run("keepalive", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		defer benchutil.ReportCPU(b)()
		benchutil.Clients(b, addr, 4, func() []byte { return reqs[n.Add(1)%250] }, func(answer []byte) bool {
			return bytes.Contains(answer, []byte("\r\nX-Ratelimit-Remaining: ")) // allowed, with the rule's headers
		})
	})
	// The same questions, 16 sent at once on each connection (which
	// nginx never does): the system calls are shared by 16, so the
	// figures are mostly the daemon's own work per question, in user
	// space, steadier than keepalive's on a loaded machine.
	b.Run("pipelined16", func(b *testing.B) {
		const depth = 16
		var n atomic.Int64
		batch := make([][]byte, 250)
		ends := make([][depth + 1]int, 250) // ends[i][k]: the first k requests of batch[i]
		for i := range batch {
			for j := range depth {
				batch[i] = append(batch[i], reqs[(i+j)%250]...)
				ends[i][j+1] = len(batch[i])
			}
		}
		b.ReportAllocs()
		defer benchutil.ReportCPU(b)()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				// pb.Next counts one question: a batch takes depth of them.
				k := 0
				for ; k < depth && pb.Next(); k++ {
				}
				if k == 0 {
					return
				}
				i := n.Add(1) % 250
				if _, err := c.Write(batch[i][:ends[i][k]]); err != nil {
					b.Error(err)
					return
				}
				if err := readAnswers(c, buf, k); err != nil {
					b.Error(err)
					return
				}
				if k < depth {
					return
				}
			}
		})
	})
}

// readAnswers reads k answers without bodies (each ends at its blank
// line), each a 200 with the rate-limit headers, from c into buf.
func readAnswers(c net.Conn, buf []byte, k int) error {
	got := 0
	for heads := 0; heads < k; {
		m, err := c.Read(buf[got:])
		if err != nil {
			return err
		}
		got += m
		heads = bytes.Count(buf[:got], []byte("\r\n\r\n"))
		if got == len(buf) && heads < k {
			return fmt.Errorf("%d answers fill %d bytes", heads, got)
		}
	}
	if ok := bytes.Count(buf[:got], []byte("HTTP/1.1 200 ")); ok != k || bytes.Count(buf[:got], []byte("\r\nX-Ratelimit-Remaining: ")) != k {
		return fmt.Errorf("want %d allowed answers, got %q", k, buf[:got])
	}
	return nil
}
