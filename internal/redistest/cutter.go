package redistest

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/redis/rueidis"
)

// Cutter is a TCP relay between a client and Redis that loses one reply.
// Armed, it passes on the first write that contains its marker, waits for
// Redis to answer it (the command has run), and then cuts the connection
// instead of passing the answer on: a command that ran in Redis whose
// reply was lost, as after a reset or a timeout past the send. With gone
// set, the cut also closes every other connection through it and refuses
// new ones: Redis unreachable from then on.
type Cutter struct {
	relay // Addr: where clients connect, 127.0.0.1:PORT

	marker []byte
	gone   bool

	mu    sync.Mutex
	armed bool
	cut   bool
}

// NewCutter relays to the Redis at addr until the test ends.
func NewCutter(tb testing.TB, addr, marker string, gone bool) *Cutter {
	tb.Helper()
	x := &Cutter{marker: []byte(marker), gone: gone}
	refuse := func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.cut && x.gone
	}
	x.start(tb, addr, refuse, func(c, s net.Conn) {
		lose := make(chan struct{})
		x.wg.Go(func() { x.back(c, s, lose) })
		x.wg.Go(func() { x.forward(c, s, lose) })
	})
	return x
}

// Arm makes the next write with the marker the one whose reply is lost.
func (x *Cutter) Arm() { x.mu.Lock(); x.armed = true; x.mu.Unlock() }

// Cut reports whether a reply has been lost.
func (x *Cutter) Cut() bool { x.mu.Lock(); defer x.mu.Unlock(); return x.cut }

// Down closes every connection through x and its listener: from now on a
// client's dial is refused, so nothing it sends reaches Redis.
func (x *Cutter) Down() {
	x.ln.Close()
	x.closeAll()
}

// forward passes the client's writes on; after the one with the marker,
// armed, it closes lose, so that back drops the reply, and stops.
func (x *Cutter) forward(c, s net.Conn, lose chan struct{}) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			s.Close()
			return
		}
		x.mu.Lock()
		drop := x.armed && bytes.Contains(buf[:n], x.marker)
		if drop {
			x.armed, x.cut = false, true
		} else if x.cut && x.gone {
			// Redis is gone: nothing more reaches it, on any connection.
			// (closeAll closes the others, but one at a time: a client
			// woken by the first close could send on another first.)
			x.mu.Unlock()
			s.Close()
			return
		}
		x.mu.Unlock()
		if drop {
			close(lose)
		}
		if _, err := s.Write(buf[:n]); err != nil || drop {
			return
		}
	}
}

// back passes Redis's replies on until lose is closed; the next reply
// (that of the marked command: the test has no other in flight) it drops,
// and cuts the connection.
func (x *Cutter) back(c, s net.Conn, lose chan struct{}) {
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if err != nil {
			return
		}
		select {
		case <-lose:
			if x.gone {
				x.closeAll()
			}
			return
		default:
		}
		if x.gone && x.Cut() { // gone: no reply comes back either (see forward)
			return
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

// Client is a Redis client through x (one connection, no client-side
// cache, so that each command crosses the relay), closed when the test
// ends.
func (x *Cutter) Client(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{x.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}
