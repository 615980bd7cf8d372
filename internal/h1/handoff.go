package h1

import (
	"errors"
	"net"
	"sync"
	"time"
)

// chanListener is the net.Listener the net/http server serves: its
// connections are those the front hands off.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// give hands c to the net/http server; false: it is closed, and so is c.
func (l *chanListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		c.Close()
		return false
	}
}

// replayConn reads buf before the connection: the bytes the front read
// before handing it off. NetConn returns the connection under it (the
// listener's ConnState looks for it).
type replayConn struct {
	net.Conn
	buf []byte
	// hdr, if not zero, caps the first read deadline net/http sets (its
	// header timeout, from the hand-off) at the front's.
	hdr time.Time
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *replayConn) NetConn() net.Conn { return c.Conn }

func (c *replayConn) SetReadDeadline(t time.Time) error {
	if !c.hdr.IsZero() {
		if t.IsZero() || t.After(c.hdr) {
			t = c.hdr
		}
		c.hdr = time.Time{}
	}
	return c.Conn.SetReadDeadline(t)
}

// CloseWrite half-closes the connection when the one under it can
// (net/http does before its 431 and similar answers; ReverseProxy when
// the upstream ends an upgraded connection, and it waits for the client
// to end its side only when this succeeded); errors.ErrUnsupported
// otherwise, so that ReverseProxy closes the connection instead.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
