package server_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/h1"
)

// BenchmarkForwardAuthFrontMemory is BenchmarkForwardAuthFront over a
// connection in memory: each read gives the front one whole question,
// as nginx sends them, and each write takes its answer, with no system
// call and no waiting. What is left is the work the daemon does per
// question in user space (the front's reading, parsing and writing, and
// the handler), steady on a loaded machine where the loopback
// benchmarks' figures vary by a tenth from run to run.
func BenchmarkForwardAuthFrontMemory(b *testing.B) {
	reqs := forwardAuthRequests()
	front := h1.New(&http.Server{Handler: forwardAuthHandler(b)})
	c := &memConn{reqs: reqs, done: make(chan struct{}), closed: make(chan struct{})}
	ln := &memListener{c: make(chan net.Conn, 1), closed: make(chan struct{})}
	b.ReportAllocs()
	defer benchutil.ReportCPU(b)()
	c.n = b.N
	ln.c <- c
	go front.Serve(ln)
	<-c.done
	b.StopTimer()
	front.Close()
	if c.bad != nil {
		b.Fatalf("bad answer: %q", c.bad)
	}
}

// memConn gives one question per Read, n of them, then waits for Close;
// Write counts the allowed answers and closes done at the nth.
type memConn struct {
	reqs         [][]byte
	n, sent, got int
	done, closed chan struct{}
	closeOnce    sync.Once
	bad          []byte
}

func (c *memConn) Read(p []byte) (int, error) {
	if c.sent == c.n {
		<-c.closed
		return 0, io.EOF
	}
	n := copy(p, c.reqs[c.sent%len(c.reqs)])
	c.sent++
	return n, nil
}

func (c *memConn) Write(p []byte) (int, error) {
	if c.got < c.n {
		k := bytes.Count(p, []byte("\r\nX-Ratelimit-Remaining: "))
		if k == 0 || !bytes.HasPrefix(p, []byte("HTTP/1.1 200 ")) {
			c.bad = append([]byte(nil), p...)
			k = c.n - c.got
		}
		if c.got += k; c.got >= c.n {
			close(c.done)
		}
	}
	return len(p), nil
}

func (c *memConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// memListener hands out the connections sent on c, then waits for Close.
type memListener struct {
	c         chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
