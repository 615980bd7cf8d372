package harness

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Closed keeps Depth requests in flight per connection and hands their
// answers over in order: each request carries its connection and its
// sequence number, the server echoes them, and done checks that answer j
// of connection i is request j of connection i; every answer counted was
// asked, and the server answered each request once. Over TCP and over a
// Unix socket (unix:/PATH).
func TestClosedPipelinesInOrder(t *testing.T) {
	var served atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		fmt.Fprintf(w, "%s %s", r.Header.Get("X-Conn"), r.Header.Get("X-Seq"))
	})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	dir, err := os.MkdirTemp("", "cl") // short: a socket's path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	usrv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: handler}}
	usrv.Start()
	t.Cleanup(usrv.Close)
	for _, c := range []struct{ net, addr string }{{"tcp", srv.Listener.Addr().String()}, {"unix", "unix:" + sock}} {
		for _, depth := range []int{1, 2, 8} {
			t.Run(c.net+"/"+strconv.Itoa(depth), func(t *testing.T) { closedInOrder(t, c.addr, depth, &served) })
		}
	}
}

// closedInOrder runs Closed at depth on 3 connections to addr for a
// moment and checks its answers (served counts the server's).
func closedInOrder(t *testing.T, addr string, depth int, served *atomic.Int64) {
	const conns = 3
	l, err := NewClosed([]string{addr}, conns, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Depth = depth
	asked, answered := make([]int, conns), make([]int, conns)
	var req []byte
	next := func(i int) []byte {
		req = fmt.Appendf(req[:0], "GET / HTTP/1.1\r\nHost: x\r\nX-Conn: %d\r\nX-Seq: %d\r\n\r\n", i, asked[i])
		asked[i]++
		return req
	}
	done := func(i, status int, body []byte) error {
		if want := fmt.Sprintf("%d %d", i, answered[i]); status != 200 || string(body) != want {
			return fmt.Errorf("connection %d: answer %d is %d %q, want 200 %q", i, answered[i], status, body, want)
		}
		answered[i]++
		return nil
	}
	before := served.Load()
	n, err := l.Run(t.Context(), 200*time.Millisecond, next, done)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i := range conns {
		if asked[i] != answered[i] {
			t.Errorf("connection %d: %d asked, %d answered", i, asked[i], answered[i])
		}
		if asked[i] < depth {
			t.Errorf("connection %d: %d asked, want at least the depth %d", i, asked[i], depth)
		}
		total += answered[i]
	}
	if int64(total) != n || served.Load()-before != n {
		t.Errorf("Run counted %d, done saw %d, the server answered %d", n, total, served.Load()-before)
	}
}
