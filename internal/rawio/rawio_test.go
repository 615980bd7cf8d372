package rawio_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rawio"
)

// pair returns a wrapped client connection and the server's end.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	return pairOn(t, "tcp", "127.0.0.1:0")
}

// pairOn is pair on network at addr.
func pairOn(t *testing.T, network, addr string) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	w := rawio.Wrap(c)
	t.Cleanup(func() { w.Close(); s.Close() })
	return w, s
}

func TestWrapsTCPOnly(t *testing.T) {
	c, s := pair(t)
	_ = s
	if _, ok := c.(*rawio.Conn); !ok && runtime.GOOS == "linux" {
		t.Fatalf("Wrap(*net.TCPConn) = %T, want *rawio.Conn on linux", c)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := rawio.Wrap(a); got != a {
		t.Fatalf("Wrap(pipe) = %T, want the pipe itself", got)
	}
}

// A large write goes out whole (the socket's buffer fills: the write
// parks and resumes), reads see every byte in order, then io.EOF.
func TestReadWriteEOF(t *testing.T) {
	c, s := pair(t)
	readWriteEOF(t, c, s)
}

// A Unix socket's stream is read and written raw too (listen:
// unix:/PATH), the same way.
func TestReadWriteEOFUnix(t *testing.T) {
	dir, err := os.MkdirTemp("", "rawio")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, s := pairOn(t, "unix", dir+"/s.sock")
	if _, ok := c.(*rawio.Conn); !ok && runtime.GOOS == "linux" {
		t.Fatalf("Wrap(*net.UnixConn) = %T, want *rawio.Conn on linux", c)
	}
	readWriteEOF(t, c, s)
}

func readWriteEOF(t *testing.T, c, s net.Conn) {
	t.Helper()
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan error, 1)
	go func() {
		n, err := c.Write(want)
		if err == nil && n != len(want) {
			err = errors.New("short write")
		}
		done <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "pong" {
		t.Fatalf("ReadAll = %q, %v; want pong, nil", b, err)
	}
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF = %d, %v", n, err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
}

func TestDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := c.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v, want a timeout", err)
	}
	// A waiting read ends when the deadline is moved into the past.
	res := make(chan error, 1)
	c.SetReadDeadline(time.Time{})
	go func() { _, err := c.Read(make([]byte, 8)); res <- err }()
	c.SetReadDeadline(time.Unix(1, 0))
	if err := <-res; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("parked Read = %v, want a timeout", err)
	}
}

func TestClose(t *testing.T) {
	c, _ := pair(t)
	res := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 8)); res <- err }()
	c.Close()
	if err := <-res; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on a closed conn = %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write on a closed conn = %v, want net.ErrClosed", err)
	}
}

// A reset by the peer is an error errors.Is matches to ECONNRESET, then
// EPIPE on a write, as on net.Conn (the proxy retries on those).
func TestReset(t *testing.T) {
	c, s := pair(t)
	s.(*net.TCPConn).SetLinger(0)
	s.Close() // sends RST
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after reset = %v, want ECONNRESET", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write after reset = %v, want EPIPE", err)
	}
}

// Reads and writes at once on one connection, as an HTTP server does.
func TestConcurrentReadWrite(t *testing.T) {
	c, s := pair(t)
	go io.Copy(s, s) // echo
	const n = 1000
	go func() {
		for i := 0; i < n; i++ {
			c.Write([]byte("ping"))
		}
	}()
	got, err := io.ReadAll(io.LimitReader(c, 4*n))
	if err != nil || len(got) != 4*n {
		t.Fatalf("echoed %d bytes, %v", len(got), err)
	}
}

// WriteRead: the request goes out, the answer comes back; bytes the peer
// sent before the request are read with it; a request too big for the
// socket's buffer is finished the ordinary way.
func TestWriteRead(t *testing.T) {
	c, s := pair(t)
	rc, ok := c.(*rawio.Conn)
	if !ok {
		t.Skip("no raw connections on " + runtime.GOOS)
	}
	sent := make(chan struct{})
	go func() {
		s.Write([]byte("early,"))
		close(sent)
		buf := make([]byte, 64)
		n, _ := io.ReadAtLeast(s, buf, len("request"))
		s.Write(append([]byte("answer to "), buf[:n]...))
	}()
	<-sent
	buf := make([]byte, 64)
	n, err := rc.WriteRead([]byte("request"), buf)
	if err != nil {
		t.Fatal(err)
	}
	got := string(buf[:n])
	for len(got) < len("early,answer to request") {
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got += string(buf[:m])
	}
	if got != "early,answer to request" {
		t.Fatalf("read %q", got)
	}

	big := bytes.Repeat([]byte("x"), 8<<20)
	go func() {
		io.ReadFull(s, make([]byte, len(big)))
		s.Write([]byte("ok"))
	}()
	n, err = rc.WriteRead(big, buf)
	if err != nil || string(buf[:n]) != "ok" {
		t.Fatalf("big: %q, %v", buf[:n], err)
	}

	s.Close()
	if _, err := rc.WriteRead([]byte("x"), buf); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after the peer closed: %v, want EOF or ECONNRESET", err)
	}
}

// WriteRead writes its request whole even when the read deadline has
// passed before it is called, then fails the read with the timeout: the
// deadline bounds the wait for the answer, not the sending of the request.
// (A request held for WriteRead whose connection took longer to dial
// than the proxy's first wait was never sent, and the proxy then waited
// response_header_timeout for an answer to nothing.)
func TestWriteReadPastDeadline(t *testing.T) {
	c, s := pair(t)
	rc, ok := c.(*rawio.Conn)
	if !ok {
		t.Skip("no raw connections on " + runtime.GOOS)
	}
	c.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := rc.WriteRead([]byte("request"), make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("WriteRead past the read deadline = %v, want a timeout", err)
	}
	s.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang detector
	got := make([]byte, len("request"))
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "request" {
		t.Fatalf("the peer got %q, %v; want the request, sent whatever the read deadline", got, err)
	}
}

// Pending tells an idle connection whose socket holds something nobody
// asked for — bytes, an EOF, a reset — from one that holds nothing, and
// leaves the bytes to be read.
func TestPending(t *testing.T) {
	c, s := pair(t)
	rc, ok := c.(*rawio.Conn)
	if !ok {
		t.Skip("no raw connections on " + runtime.GOOS)
	}
	if rc.Pending() {
		t.Fatal("Pending on an empty socket")
	}
	s.Write([]byte("x"))
	waitPending(t, rc, "bytes")
	buf := make([]byte, 8)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("Read after Pending = %q, %v; want the byte, not consumed by the peek", buf[:n], err)
	}
	if rc.Pending() {
		t.Fatal("Pending once the byte is read")
	}
	s.Close()
	waitPending(t, rc, "an EOF")

	c, s = pair(t)
	rc = c.(*rawio.Conn)
	s.(*net.TCPConn).SetLinger(0) // close with a reset
	s.Close()
	waitPending(t, rc, "a reset")

	c.Close()
	if !rc.Pending() {
		t.Error("Pending on a closed connection = false, want true: it is not fit to send on")
	}
}

// waitPending waits until rc.Pending reports what the peer sent (what),
// which loopback delivers within the peer's call, but not necessarily
// before this goroutine looks.
func waitPending(t *testing.T, rc *rawio.Conn, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !rc.Pending() {
		if time.Now().After(deadline) {
			t.Fatalf("Pending never reported %s", what)
		}
		runtime.Gosched()
	}
}

// The race detector sees a write to a socket happen before any read of
// what the write sent, as it does through net.Conn (package syscall's
// Read and Write tell it so): a client that writes a request from one
// goroutine and reads the answer in another, as rueidis does, may then
// use the request's memory again once the answer is in. Raw system calls
// told it nothing, and under -race a daemon test failed on rueidis
// reusing a request's buffer, whose writer had not yet left its write
// (on one connection the poller's lock orders them only once it has).
// Here the two ends are both raw, so nothing else orders them. The
// assertion is the race detector's: this test fails under -race
// without the ordering; without -race it checks only the bytes.
func TestWriteHappensBeforeRead(t *testing.T) {
	c, s := pair(t)
	s = rawio.Wrap(s)
	request := []byte("ping")
	go func() {
		// As a client's writer: the request is copied into the
		// connection's buffer, which is then written.
		wire := append([]byte(nil), request...)
		if _, err := c.Write(wire); err != nil {
			t.Error(err)
		}
	}()
	got := make([]byte, len(request))
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "ping" {
		t.Fatalf("read %q, want %q", got, "ping")
	}
	request[0] = 'P' // it is in: the request's memory may be used again
}
