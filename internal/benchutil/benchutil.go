// Package benchutil is support for the repository's Go benchmarks: the
// process's CPU time per operation, and a raw HTTP/1.1 client that
// allocates nothing, so that allocs/op and profiles of a server
// benchmarked over loopback are the server's own.
package benchutil

import (
	"bytes"
	"net"
	"testing"
)

// ReportCPU resets b's timer and returns a function, to defer, that
// reports the process's CPU time per operation as cpu-ns/op: unlike
// ns/op, it does not grow when other processes compete for the cores.
// Call it after setup. Client and server both run in this process.
func ReportCPU(b *testing.B) func() {
	before := CPUTime()
	b.ResetTimer()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(CPUTime()-before)/float64(b.N), "cpu-ns/op")
	}
}

// ReadAnswer reads one HTTP/1.1 answer to a single request in flight from
// c into buf, without allocating: the head, then the body its
// Content-Length announces (none without one). It returns the answer
// (head and body), and false if c fails, the answer is not a 200, is
// larger than buf, or more bytes than the answer arrived.
func ReadAnswer(c net.Conn, buf []byte) ([]byte, bool) {
	n := 0
	for {
		m, err := c.Read(buf[n:])
		if err != nil {
			return nil, false
		}
		n += m
		end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
		if end < 0 {
			if n == len(buf) {
				return nil, false
			}
			continue
		}
		head := buf[:end]
		if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) {
			return nil, false
		}
		cl := 0
		if i := bytes.Index(head, []byte("\r\nContent-Length: ")); i >= 0 {
			for _, d := range head[i+len("\r\nContent-Length: "):] {
				if d < '0' || d > '9' {
					break
				}
				cl = cl*10 + int(d-'0')
			}
		}
		total := end + 4 + cl
		if total > len(buf) {
			return nil, false
		}
		for n < total {
			m, err := c.Read(buf[n:])
			if err != nil {
				return nil, false
			}
			n += m
		}
		return buf[:total], n == total
	}
}

// Clients runs b.RunParallel with the given parallelism: each goroutine
// dials addr once, then per operation writes next() and reads the answer
// (ReadAnswer), which check, if not nil, must accept.
func Clients(b *testing.B, addr string, parallelism int, next func() []byte, check func(answer []byte) bool) {
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		for pb.Next() {
			if _, err := c.Write(next()); err != nil {
				b.Error(err)
				return
			}
			answer, ok := ReadAnswer(c, buf)
			if !ok || check != nil && !check(answer) {
				b.Errorf("bad answer: %q", answer)
				return
			}
		}
	})
}
