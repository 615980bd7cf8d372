package h1_test

import (
	"net"
	"net/http"
	"sync"
	"testing"
)

// gatedListener accepts a connection only when let: one let, one Accept.
// A server starts a connection's header deadline (ReadHeaderTimeout) when
// it accepts it, so a test that dials, then writes its request, races that
// deadline: a write a loaded machine delays past it (50ms in these tests)
// finds the connection closed. Dialled and written before it is let in,
// the connection's head is whole in its buffer when the deadline starts.
type gatedListener struct {
	net.Listener
	let    chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (l *gatedListener) Accept() (net.Conn, error) {
	select {
	case <-l.let:
	case <-l.closed:
	}
	return l.Listener.Accept()
}

func (l *gatedListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// serveGated is serveWith on a gatedListener: let lets one connection in.
func serveGated(t *testing.T, srv *http.Server, fast bool) (addr string, let func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedListener{Listener: ln, let: make(chan struct{}), closed: make(chan struct{})}
	return serveOn(t, srv, fast, g), func() { g.let <- struct{}{} }
}
