package proxy

import (
	"errors"
	"net"
	"testing"
	"time"
)

type closeCounter struct {
	net.Conn
	closed *int
}

func (c closeCounter) Close() error { *c.closed++; return nil }

// Connections idle past idleTimeout at the bottom of the pool are closed
// when another is given back; fresh ones stay, the newest on top; a full
// pool closes what it cannot keep.
func TestPoolClosesStale(t *testing.T) {
	p := &pool{idleTimeout: time.Minute, max: 3}
	closed := 0
	conn := func() *upConn { return &upConn{nc: closeCounter{closed: &closed}} }
	old1, old2, fresh := conn(), conn(), conn()
	p.put(old1, time.Now())
	p.put(old2, time.Now())
	p.put(fresh, time.Now())
	past := time.Now().Add(-2 * time.Minute)
	old1.used, old2.used = past, past
	newest := conn()
	p.put(newest, time.Now())
	if closed != 2 || len(p.idle) != 2 || p.idle[0] != fresh || p.idle[1] != newest {
		t.Fatalf("after giving one back beside two stale: %d closed, %d idle; want the 2 stale closed, [fresh newest] kept", closed, len(p.idle))
	}
	p.put(conn(), time.Now())
	p.put(conn(), time.Now())
	if closed != 3 || len(p.idle) != 3 {
		t.Errorf("a full pool (max 3): %d closed, %d idle; want 3 closed, 3 idle", closed, len(p.idle))
	}
	if c, reused, err := p.get(t.Context(), time.Now()); err != nil || !reused || c == fresh {
		t.Errorf("get: reused %v, err %v, got the oldest; want the newest, reused", reused, err)
	}
}

// An abort (the client went away) holds against the deadlines a round
// trip sets after it (the body's, none): one would otherwise undo it, and
// the connection wait on a silent upstream as if the client were there.
func TestAbortOutlastsDeadlines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			t.Cleanup(func() { c.Close() }) // open and silent until the test ends
		}
	}()
	p := &pool{addr: ln.Addr().String(), idleTimeout: time.Minute, max: 1}
	c, _, err := p.get(t.Context(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer c.nc.Close()
	c.abort()
	for _, d := range []time.Time{{}, time.Now().Add(time.Hour)} {
		c.setReadDeadline(d)
		errc := make(chan error, 1)
		go func() { _, err := c.br.Peek(1); errc <- err }()
		select {
		case err := <-errc:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("read after abort, then deadline %v: %v, want a timeout", d, err)
			}
		case <-time.After(10 * time.Second):
			c.nc.Close()
			t.Fatalf("read after abort, then deadline %v: still waiting on the silent upstream, want the abort to hold", d)
		}
	}
}
