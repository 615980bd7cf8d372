package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Switch is a TCP relay between a client and one of several Redis
// servers, as a virtual address or a DNS name moved from one server to
// another: To closes every connection through it, and the clients' new
// connections reach the new server.
type Switch struct {
	relay // Addr: where clients connect, 127.0.0.1:PORT

	mu sync.Mutex
	to string
}

// NewSwitch relays to the Redis at addr until To or the test's end.
func NewSwitch(tb testing.TB, addr string) *Switch {
	tb.Helper()
	x := &Switch{to: addr}
	x.target = func() string { x.mu.Lock(); defer x.mu.Unlock(); return x.to }
	x.start(tb, addr, nil, func(c, s net.Conn) {
		x.wg.Go(func() { io.Copy(s, c); s.Close() })
		x.wg.Go(func() { io.Copy(c, s); c.Close() })
	})
	return x
}

// To makes addr the server of new connections and closes the current ones.
func (x *Switch) To(addr string) {
	x.mu.Lock()
	x.to = addr
	x.mu.Unlock()
	x.closeAll()
}
