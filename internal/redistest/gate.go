package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Gate is a TCP relay between a client and Redis that can be shut. Shut, it
// closes every connection through it and refuses new ones: a command sent
// then fails without reaching Redis, as when Redis is down, but Redis
// keeps its data for when the gate opens again.
type Gate struct {
	relay // Addr: where clients connect, 127.0.0.1:PORT

	mu   sync.Mutex
	shut bool
}

// NewGate relays to the Redis at addr until the test ends; it starts open.
func NewGate(tb testing.TB, addr string) *Gate {
	tb.Helper()
	g := &Gate{}
	g.start(tb, addr, g.isShut, func(c, s net.Conn) {
		if g.isShut() { // shut while this one was dialled: closeAll missed it
			c.Close()
			s.Close()
			return
		}
		g.wg.Go(func() { io.Copy(s, c); s.Close() })
		g.wg.Go(func() { io.Copy(c, s); c.Close() })
	})
	return g
}

func (g *Gate) isShut() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.shut }

// Shut closes every connection through g and refuses new ones until Open.
func (g *Gate) Shut() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
	g.closeAll()
}

// Open lets clients connect again.
func (g *Gate) Open() { g.mu.Lock(); g.shut = false; g.mu.Unlock() }
