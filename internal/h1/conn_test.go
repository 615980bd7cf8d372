package h1_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/listener"
)

// echo answers with what it got, and whether it was served by the fast
// front (no body reader of net/http's: http.NoBody).
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	via := "net/http"
	if r.Body == http.NoBody && r.Method != "POST" {
		via = "either"
	}
	io.WriteString(w, r.Method+" "+r.RequestURI+" "+string(body)+" "+via)
})

// Pipelined requests are answered in order, the simple ones on the front,
// and the first other one (and all after it) by net/http with the bytes
// already read: answers identical to net/http's alone.
func TestPipelineAndHandOff(t *testing.T) {
	plain, front := serveBoth(t, echo)
	for _, tc := range []struct {
		raw     string
		methods []string
	}{
		{"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"GET", "HEAD", "GET"}},
		{"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"GET", "POST", "GET"}},
		{"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"POST", "GET"}},
		// Smuggling defence: net/http refuses both framings at once.
		{"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", []string{"GET"}},
		{"GET / HTTP/1.1\r\n\r\n", []string{"GET"}},                       // no Host: 400
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", []string{"GET"}}, // 400
		{"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.1\nHost: x\nConnection: close\n\n", []string{"GET"}},
		{"GET / HTTP/3.0\r\nHost: x\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 1<<21) + "\r\n\r\n", []string{"GET"}}, // 431
		{"GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n", []string{"GET"}},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", []string{"GET", "GET"}},
		{"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET"}},
	} {
		a, b := exchange(t, plain, tc.raw, tc.methods...), exchange(t, front, tc.raw, tc.methods...)
		if len(a) != len(b) {
			t.Errorf("%q: %d answers from net/http, %d from the front", tc.raw, len(a), len(b))
			continue
		}
		for i := range a {
			same(t, short(tc.raw), a[i], b[i])
		}
	}
}

// Upgrades are net/http's: the handler can hijack the handed-off
// connection.
func TestUpgradeHandedOff(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo: " + line)
		brw.Flush()
	})
	front := serveWith(t, &http.Server{Handler: h}, true)
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "hello\n")
	if got, _ := br.ReadString('\n'); got != "echo: hello\n" {
		t.Errorf("after the upgrade: %q", got)
	}
}

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
	front := serveWith(t, srv, true)

	c1, _ := net.Dial("tcp", front) // headers never end
	defer c1.Close()
	io.WriteString(c1, "GET / HTTP/1.1\r\nHost: x\r\n")
	waitClosed(t, c1)

	c2, _ := net.Dial("tcp", front) // one request, then idle
	defer c2.Close()
	io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
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
			front := serveWith(t, &http.Server{Handler: echo, ReadHeaderTimeout: tc.rht, IdleTimeout: tc.idle}, true)
			c, err := net.Dial("tcp", front)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for i := range 3 {
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
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

// Watch: a client that closes cancels the watched context; one that sends
// its next request meanwhile loses no byte of it.
func TestWatch(t *testing.T) {
	goneSeen := make(chan bool, 1)
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, stop := h1.Watch(r.Context())
		defer stop()
		switch r.URL.Path {
		case "/gone":
			entered <- struct{}{}
			<-ctx.Done() // the test fails by its own timeout if this never comes
			goneSeen <- true
		case "/next":
			entered <- struct{}{}
			for c := 0; c < 2; c++ {
				// The next request arrives while watched; the read
				// of the watcher takes its first byte or not.
				runtime.Gosched()
			}
			if ctx.Err() != nil {
				t.Error("a client that sent its next request was taken for gone")
			}
		}
		io.WriteString(w, r.URL.Path)
	})
	front := serveWith(t, &http.Server{Handler: h}, true)

	c, _ := net.Dial("tcp", front)
	io.WriteString(c, "GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	c.Close()
	<-goneSeen

	c2, _ := net.Dial("tcp", front)
	defer c2.Close()
	br := bufio.NewReader(c2)
	io.WriteString(c2, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	io.WriteString(c2, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"/next", "/after"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != want {
			t.Errorf("got %q; want %q", b, want)
		}
	}
}

// AfterFunc on the front's request context: stop before Close keeps f
// from running; Close runs the one set by a request in its handler; a
// context derived from the request's gets context.AfterFunc.
func TestAfterFunc(t *testing.T) {
	ran := make(chan string, 4)
	entered := make(chan struct{})
	stopped := make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stop":
			stop := h1.AfterFunc(r.Context(), func() { ran <- "/stop" })
			stopped <- stop()
			if stop() {
				t.Error("stop returned true twice")
			}
		case "/derived":
			ctx, cancel := context.WithCancel(r.Context())
			stop := h1.AfterFunc(ctx, func() { ran <- "/derived" })
			cancel() // not the server closing: context.AfterFunc's doing
			if got := <-ran; got != "/derived" {
				t.Errorf("ran %q", got)
			}
			if stop() {
				t.Error("stop after f ran returned true")
			}
		case "/close":
			stop := h1.AfterFunc(r.Context(), func() { ran <- "/close" })
			entered <- struct{}{}
			<-r.Context().Done() // the server closes
			if got := <-ran; got != "/close" {
				t.Errorf("ran %q", got)
			}
			stopped <- stop()
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := h1.New(&http.Server{Handler: h})
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	defer func() { srv.Close(); <-done }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, path := range []string{"/stop", "/derived"} {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		if path == "/stop" && !<-stopped {
			t.Error("stop before Close returned false")
		}
	}
	io.WriteString(c, "GET /close HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	srv.Close()
	if <-stopped {
		t.Error("stop after Close ran f returned true")
	}
	select {
	case got := <-ran:
		t.Errorf("%q ran too", got)
	default:
	}
}

// writeCounter counts the writes on the connections it accepts.
type writeCounter struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// With BatchAnswers, pipelined requests that came in together are answered
// with one write, the answers the same as net/http's, in order; a request
// handed off to net/http mid-pipeline gets its answer after the ones held
// before it; a lone request is answered at once (held answers never wait
// for a request that is not there).
func TestBatchAnswers(t *testing.T) {
	plain := serveWith(t, &http.Server{Handler: echo}, false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wc := &writeCounter{Listener: ln}
	f := h1.New(&http.Server{Handler: echo})
	f.BatchAnswers = 16
	f.MaxBody = 1024
	done := make(chan struct{})
	go func() { f.Serve(wc); close(done) }()
	t.Cleanup(func() { f.Close(); <-done })
	front := ln.Addr().String()

	get := func(i int) string { return "GET /" + strconv.Itoa(i) + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	var ten strings.Builder
	var methods []string
	for i := range 10 {
		ten.WriteString(get(i))
		methods = append(methods, "GET")
	}
	ten.WriteString("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
	methods = append(methods, "POST")
	handOff := get(1) + get(2) + "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get(3) + "GET /4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		raw       string
		methods   []string
		maxWrites int64
	}{
		{ten.String(), methods, 1}, // one read brings them all: one write
		{handOff, []string{"GET", "GET", "POST", "GET", "GET"}, -1},
		{get(7) + "GET /8 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"GET", "GET"}, 1},
	} {
		before := wc.writes.Load()
		a, b := exchange(t, plain, tc.raw, tc.methods...), exchange(t, front, tc.raw, tc.methods...)
		if len(a) != len(b) {
			t.Fatalf("%q: %d answers from net/http, %d from the front", short(tc.raw), len(a), len(b))
		}
		for i := range a {
			same(t, short(tc.raw), a[i], b[i])
		}
		if w := wc.writes.Load() - before; tc.maxWrites > 0 && w > tc.maxWrites {
			t.Errorf("%q: %d answers in %d writes, want at most %d", short(tc.raw), len(b), w, tc.maxWrites)
		}
	}
	// A lone request on a kept-alive connection: answered without
	// waiting for another.
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a bound, not a threshold
	br := bufio.NewReader(c)
	for i := range 3 {
		io.WriteString(c, get(i))
		r, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("lone request %d: %v", i, err)
		}
		body, _ := io.ReadAll(r.Body)
		if want := "GET /" + strconv.Itoa(i) + "  either"; string(body) != want {
			t.Errorf("lone request %d: %q, want %q", i, body, want)
		}
	}
}
