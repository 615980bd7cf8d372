// Package rawio reads and writes a TCP (or Unix stream) connection with
// raw system calls on its non-blocking socket, through the connection's
// syscall.RawConn, so that the runtime's poller still parks the goroutine
// while the socket is not ready and deadlines and Close still apply.
//
// Why: every read and write through net.Conn enters the runtime's syscall
// state. On a loopback proxy under load a write does the receiver's TCP
// work in the same call and often outlasts a tick of the runtime's
// monitor thread (sysmon), which then takes the goroutine's P away and
// hands it to another thread; and while that keeps happening sysmon never
// slows down (it wakes every 20 µs). A read or write on a non-blocking
// socket never waits: done raw, the goroutine keeps its P for the few
// microseconds the kernel works, like any other code. Profiled on the
// proxy under wrk (docs/bench-daemon.md): the monitor's wake-ups, the P
// hand-offs and thread wake-ups they cause were about a tenth of its CPU.
//
// Conn's Read and Write behave as net.Conn's: io.EOF at the end, errors
// that errors.Is matches against syscall errnos (ECONNRESET, EPIPE), and
// net.Error timeouts when a deadline passes.
package rawio

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// Conn is a net.Conn whose Read and Write are raw (see the package
// comment); the other methods are the connection's.
type Conn struct {
	net.Conn
	rc syscall.RawConn

	rmu sync.Mutex // one Read at a time uses r
	r   op
	wmu sync.Mutex
	w   op

	// Pending's peek, bound once (no closure per call), and its answer.
	peek    func(fd uintptr)
	pending bool
}

// op is one Read or Write in progress: its buffer, the bytes done, the
// error, and the function RawConn calls with the socket (bound once, so
// that no closure is allocated per call).
type op struct {
	p    []byte
	n    int
	err  error
	f    func(fd uintptr) bool
	now  func(fd uintptr) bool // a write's f that never waits (WriteNow)
	some func(fd uintptr) bool // a write's f that waits only for room for a first byte (WriteSome)
	// first, on a read: bytes to write before waiting for the socket to
	// be readable (WriteRead); what is left of them if the write could
	// not finish at once.
	first []byte
}

// Wrap returns c with raw reads and writes when it is a *net.TCPConn, or
// a *net.UnixConn of a stream socket (network "unix", as a Unix-socket
// listener accepts), on a system rawio supports, else c itself.
func Wrap(c net.Conn) net.Conn {
	if !supported {
		return c
	}
	var sc syscall.Conn
	switch tc := c.(type) {
	case *net.TCPConn:
		sc = tc
	case *net.UnixConn:
		if a := tc.LocalAddr(); a == nil || a.Network() != "unix" {
			return c // a datagram or packet socket: its reads are messages
		}
		sc = tc
	default:
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &Conn{Conn: c, rc: rc}
	rw.r.f = rw.read
	rw.w.f = rw.write
	rw.w.now = rw.writeNow
	rw.w.some = rw.writeSome
	rw.peek = rw.peekFd
	return rw
}

// NetConn returns the connection under c.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection (shuts down its writing side),
// as *net.TCPConn's; errors.ErrUnsupported if the connection under c
// cannot.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.r.p, c.r.n, c.r.err = p, 0, nil
	err := c.rc.Read(c.r.f)
	n := c.r.n
	if err == nil {
		err = c.r.err
	}
	c.r.p, c.r.err = nil, nil
	c.rmu.Unlock()
	return n, err
}

func (c *Conn) Write(p []byte) (int, error) { return c.writeWith(p, c.w.f) }

// Pending reports whether the socket holds anything to read — bytes, an
// EOF, an error such as a reset — without reading it and without waiting:
// one non-blocking peek, made raw as reads are, so it costs no more than
// the system call. A connection that cannot be peeked (closed) is
// pending too: it is not fit to send on. For a connection kept idle
// between requests, where anything there is something nobody asked for.
// No Read may run meanwhile.
func (c *Conn) Pending() bool {
	c.rmu.Lock()
	c.pending = true // stays so when Control fails
	c.rc.Control(c.peek)
	p := c.pending
	c.rmu.Unlock()
	return p
}

// WriteSome writes what the socket takes of p, waiting (until the write
// deadline) only while it takes nothing: it returns once some of p is
// written, n < len(p) when the buffer filled.
func (c *Conn) WriteSome(p []byte) (int, error) { return c.writeWith(p, c.w.some) }

// WriteNow writes what the socket takes of p at once, without waiting
// for room: n < len(p) with a nil error when its buffer is full. A write
// deadline that has passed still fails it.
func (c *Conn) WriteNow(p []byte) (int, error) { return c.writeWith(p, c.w.now) }

// writeWith writes p through RawConn.Write with f (one of the bound
// write functions) as its callback.
func (c *Conn) writeWith(p []byte, f func(fd uintptr) bool) (int, error) {
	c.wmu.Lock()
	c.w.p, c.w.n, c.w.err = p, 0, nil
	var err error
	if len(p) > 0 {
		err = c.rc.Write(f)
	}
	n := c.w.n
	if err == nil {
		err = c.w.err
	}
	c.w.p, c.w.err = nil, nil
	c.wmu.Unlock()
	return n, err
}

// WriteRead writes w whole, then waits until the socket is readable and
// reads into p: for a request whose answer cannot come before it is
// sent, it saves the read that Read would try first and find empty (one
// system call per exchange). The poller's readiness is reset before w
// goes out, so an answer arriving at any time after it wakes the wait;
// bytes that came before w (none, in a request-answer protocol) are read
// with the answer once it arrives. A read deadline that has passed still
// lets w go out (only a write deadline stops it), then fails the read. No
// Write may run meanwhile.
func (c *Conn) WriteRead(w, p []byte) (int, error) {
	if len(p) == 0 {
		if _, err := c.Write(w); err != nil {
			return 0, err
		}
		return 0, nil
	}
	c.rmu.Lock()
	c.wmu.Lock()
	c.r.p, c.r.n, c.r.err, c.r.first = p, 0, nil, w
	err := c.rc.Read(c.r.f)
	n, rest := c.r.n, c.r.first
	// The poller refused the read before the callback ran (its deadline
	// had passed): w is unsent. The read deadline bounds the wait for
	// the answer, not the sending of w.
	unsent := err != nil && len(rest) > 0
	if err == nil {
		err = c.r.err
	}
	c.r.p, c.r.err, c.r.first = nil, nil, nil
	c.wmu.Unlock()
	c.rmu.Unlock()
	if unsent {
		if _, werr := c.Write(rest); werr != nil {
			return 0, werr
		}
		return 0, err
	}
	if err != nil || len(rest) == 0 {
		return n, err
	}
	// The socket's buffer was full: the rest the ordinary way.
	if _, err := c.Write(rest); err != nil {
		return 0, err
	}
	return c.Read(p)
}
