package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// countingListener hands each connection it accepts, counting the bytes
// read from it, to conns.
type countingListener struct {
	net.Listener
	conns chan *countingConn
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c, closed: make(chan struct{})}
	l.conns <- cc
	return cc, nil
}

// countingConn counts the bytes read from it; closed is closed when the
// server closes it, after which it reads nothing more.
type countingConn struct {
	net.Conn
	read   atomic.Int64
	once   sync.Once
	closed chan struct{}
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestDecisionBodiesBounded: a client sending a body of 64 MiB to each
// endpoint of the decision API, announced with its length or chunked,
// has the server read a bounded part of it, whatever it sends: /v1/check
// and /v1/report answer 413 naming the cap, at once for a length over
// MaxBodyBytes, after MaxBodyBytes of a chunked body; /v1/forward-auth
// reads no body (the gateway's request is in its headers) and answers.
// What net/http reads of a body left unread, to keep the connection, is
// its own constant: none of a length over 256 KiB; of a chunked body, up
// to 256 KiB as the answer starts and 256 KiB more as it ends. Bytes are
// counted where the server reads them from each connection, once the
// server has closed it (net/http drains an unread body after it has
// written the answer: counted as they come, a case's count would take in
// the drain of the connection before); 64 KiB more is slack for its
// buffers.
func TestDecisionBodiesBounded(t *testing.T) {
	const maxBody = 4 << 10
	f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) { o.MaxBodyBytes = maxBody })
	ln := &countingListener{Listener: newLocalListener(t), conns: make(chan *countingConn, 1)}
	srv := httptest.NewUnstartedServer(f.srv.Config.Handler)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	const announced = 64 << 20
	const drained = 2 * 256 << 10 // net/http's, of a chunked body left unread
	type endpoint struct {
		path, head string
		status     int
		says       string
		most       int64
	}
	var cases []endpoint
	for _, framing := range []string{fmt.Sprintf("Content-Length: %d\r\n", announced), "Transfer-Encoding: chunked\r\n"} {
		cases = append(cases,
			endpoint{"/v1/check", framing, http.StatusRequestEntityTooLarge, fmt.Sprintf("larger than %d bytes", maxBody), drained + maxBody + 64<<10},
			endpoint{"/v1/report", framing, http.StatusRequestEntityTooLarge, fmt.Sprintf("larger than %d bytes", maxBody), drained + maxBody + 64<<10},
			endpoint{"/v1/forward-auth", "X-Forwarded-Uri: /x\r\nX-Api-Key: k\r\n" + framing, http.StatusOK, "", drained + 64<<10})
	}
	for _, c := range cases {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc := <-ln.conns
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: sluice\r\n%s\r\n", c.path, c.head)
		chunked := strings.Contains(c.head, "chunked")
		// The body as the server reads it, until it answers and closes:
		// a writer that stops at the first failed write.
		done := make(chan struct{})
		go func() {
			defer close(done)
			chunk := []byte(strings.Repeat("x", 32<<10))
			if chunked {
				chunk = []byte("8000\r\n" + string(chunk) + "\r\n")
			}
			for sent := 0; sent < announced; sent += 32 << 10 {
				if _, err := conn.Write(chunk); err != nil {
					return
				}
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		<-done
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
			t.Errorf("%s with a body of %d bytes (%q): %d %q, want %d saying %q", c.path, announced, c.head, resp.StatusCode, body, c.status, c.says)
		}
		select {
		case <-sc.closed:
		case <-time.After(time.Minute): // a hang detector, not a bound
			t.Fatalf("%s (%q): the server never closed the connection of a body it does not read", c.path, c.head)
		}
		got := sc.read.Load()
		if got > c.most {
			t.Errorf("%s (%q): the server read %d bytes of a body of %d, want at most %d", c.path, c.head, got, announced, c.most)
		}
		t.Logf("%s (%q): %d, %d bytes read of %d sent", c.path, c.head, resp.StatusCode, got, announced)
	}
}

func newLocalListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
