package h1_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/listener"
)

// states records the ConnState calls per connection.
type states struct {
	mu sync.Mutex
	m  map[net.Conn][]http.ConnState
}

func (s *states) record(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[net.Conn][]http.ConnState{}
	}
	s.m[c] = append(s.m[c], st)
}

func (s *states) all() [][]http.ConnState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]http.ConnState
	for _, v := range s.m {
		out = append(out, append([]http.ConnState(nil), v...))
	}
	return out
}

// waitClosed waits until the server closes c (a read returns an error
// other than a timeout).
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a bound, not a threshold: the test fails if it hangs
	if _, err := io.Copy(io.Discard, c); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the server did not close the connection")
		}
	}
}

// ReadHeaderTimeout and IdleTimeout close the connection as net/http's
// do, and ConnState sees new, active, idle, closed.
func TestTimeoutsAndStates(t *testing.T) {
	var st states
	srv := &http.Server{Handler: echo, ReadHeaderTimeout: 50 * time.Millisecond, IdleTimeout: 50 * time.Millisecond, ConnState: st.record}
	front, let := serveGated(t, srv, true)

	c1, _ := net.Dial("tcp", front) // headers never end
	defer c1.Close()
	io.WriteString(c1, "GET / HTTP/1.1\r\nHost: x\r\n")
	let()
	waitClosed(t, c1)

	c2, _ := net.Dial("tcp", front) // one request, then idle
	defer c2.Close()
	io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // whole before the front accepts it (see gatedListener)
	let()
	if resp, err := http.ReadResponse(bufio.NewReader(c2), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	waitClosed(t, c2)

	for closed := 0; closed < 2; runtime.Gosched() { // until both are recorded closed
		closed = 0
		for _, seq := range st.all() {
			if seq[len(seq)-1] == http.StateClosed {
				closed++
			}
		}
	}
	var sawIdle bool
	for _, seq := range st.all() {
		if seq[0] != http.StateNew || seq[len(seq)-1] != http.StateClosed {
			t.Errorf("states %v: want new ... closed", seq)
		}
		if len(seq) == 4 && seq[1] == http.StateActive && seq[2] == http.StateIdle {
			sawIdle = true
		}
	}
	if !sawIdle {
		t.Errorf("states %v: want one connection new, active, idle, closed", st.all())
	}
}

// The header timeout applies to each request's head that is not whole at
// once, from its first byte, also after requests whose heads were (and
// with no idle timeout to close the connection instead); the idle timeout
// after several requests in a row.
func TestTimeoutsAfterRequests(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rht, idle time.Duration
		then      string
	}{
		{"header", 50 * time.Millisecond, 0, "GET / HTTP/1.1\r\nHost: x\r\n"},
		{"idle", time.Hour, 50 * time.Millisecond, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front, let := serveGated(t, &http.Server{Handler: echo, ReadHeaderTimeout: tc.rht, IdleTimeout: tc.idle}, true)
			c, err := net.Dial("tcp", front)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			// The three requests at once, before the front accepts the
			// connection (see gatedListener): each head is whole in its
			// buffer when read, and no idle wait comes between them. Sent
			// one after the other's answer, each raced the 50ms idle
			// timeout on a loaded machine.
			io.WriteString(c, strings.Repeat("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 3))
			let()
			for i := range 3 {
				if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
					t.Fatalf("request %d: %v %v", i, resp, err)
				} else {
					io.Copy(io.Discard, resp.Body)
				}
			}
			io.WriteString(c, tc.then)
			waitClosed(t, c)
		})
	}
}

// Shutdown closes idle connections at once, lets the request in flight
// finish (its answer is whole), and refuses new connections.
func TestShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := h1.New(&http.Server{Handler: h})
	served := make(chan error, 1)
	go func() { served <- f.Serve(ln) }()

	idle, _ := net.Dial("tcp", ln.Addr().String())
	defer idle.Close()
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil {
		t.Fatal(err)
	}
	busy, _ := net.Dial("tcp", ln.Addr().String())
	defer busy.Close()
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- f.Shutdown(context.Background()) }()
	waitClosed(t, idle)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v; want http.ErrServerClosed", err)
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "done" {
		t.Errorf("the request in flight got %q", b)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("a connection was accepted after Shutdown")
	}
}

// max_connections is one count over both paths: the listener counts a
// connection from accept to close, whichever engine serves it.
func TestOneConnectionCapOverBothPaths(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, wl := listener.Server(ln, echo, listener.Options{Name: "proxy", MaxConnections: 2})
	f := h1.New(srv)
	done := make(chan struct{})
	go func() { f.Serve(wl); close(done) }()
	t.Cleanup(func() { f.Close(); <-done })
	addr := ln.Addr().String()

	ask := func(c net.Conn, br *bufio.Reader, raw string) string {
		t.Helper()
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	fast, _ := net.Dial("tcp", addr)
	defer fast.Close()
	if got := ask(fast, bufio.NewReader(fast), "GET /f HTTP/1.1\r\nHost: x\r\n\r\n"); got != "GET /f  either" {
		t.Fatalf("fast: %q", got)
	}
	slow, _ := net.Dial("tcp", addr)
	defer slow.Close()
	if got := ask(slow, bufio.NewReader(slow), "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok"); got != "POST /s ok net/http" {
		t.Fatalf("handed off: %q", got)
	}
	if wl.Open() != 2 {
		t.Fatalf("open connections: %d; want 2 (one per path)", wl.Open())
	}
	third, _ := net.Dial("tcp", addr)
	defer third.Close()
	waitClosed(t, third) // over the cap: closed at once
	slow.Close()
	for wl.Open() != 1 {
		runtime.Gosched() // until the handed-off connection is counted out
	}
	fourth, _ := net.Dial("tcp", addr)
	defer fourth.Close()
	if got := ask(fourth, bufio.NewReader(fourth), "GET /4 HTTP/1.1\r\nHost: x\r\n\r\n"); got != "GET /4  either" {
		t.Errorf("after one closed: %q", got)
	}
}
