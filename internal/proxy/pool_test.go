package proxy

import (
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
