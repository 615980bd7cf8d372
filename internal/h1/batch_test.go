package h1_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
)

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
