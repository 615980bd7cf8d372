package redistest

import (
	"net"
	"sync"
	"testing"
)

// relay is what Cutter and Holder share: a listener on a free loopback
// port whose clients are each relayed to Redis over a connection of their
// own, every connection and goroutine of it ended with the test.
type relay struct {
	Addr string // where clients connect: 127.0.0.1:PORT

	ln      net.Listener
	wg      sync.WaitGroup // the accept loop and the pipes' goroutines
	connsMu sync.Mutex
	conns   []net.Conn
	// target, if set, is asked for the address of each new client's
	// Redis instead of start's addr (Switch).
	target func() string
}

// start listens and, until the test ends, accepts clients: refuse (if set)
// returning true closes a new client at once; otherwise it dials the Redis
// at addr and calls pipe with both ends, which starts the goroutines
// moving bytes between them with r.wg.Go. At the test's end the listener
// and every connection are closed and those goroutines waited for.
func (r *relay) start(tb testing.TB, addr string, refuse func() bool, pipe func(c, s net.Conn)) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r.Addr, r.ln = ln.Addr().String(), ln
	tb.Cleanup(func() {
		ln.Close()
		r.closeAll()
		r.wg.Wait()
	})
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if refuse != nil && refuse() {
				c.Close()
				continue
			}
			to := addr
			if r.target != nil {
				to = r.target()
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			// Asked again with the list locked: a client accepted while a
			// Cutter cut (and closed every connection it knew of) is
			// refused here, not kept as the one way left to Redis.
			r.connsMu.Lock()
			if refuse != nil && refuse() {
				r.connsMu.Unlock()
				c.Close()
				s.Close()
				continue
			}
			r.conns = append(r.conns, c, s)
			r.connsMu.Unlock()
			pipe(c, s)
		}
	})
}

// closeAll closes every connection through r, both ends.
func (r *relay) closeAll() {
	r.connsMu.Lock()
	defer r.connsMu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}
