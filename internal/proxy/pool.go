package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/rawio"
)

// pool keeps idle HTTP/1.1 connections to the upstream for the fast path
// (fast.go). Connections are taken and given back by the handler's own
// goroutine: no goroutine or channel per connection or request.
type pool struct {
	addr        string // host:port
	dialer      net.Dialer
	idleTimeout time.Duration
	max         int

	mu     sync.Mutex
	idle   []*upConn // LIFO: the most recently used connection is warmest
	closed bool      // closeIdle was called: connections given back are closed
}

// closeIdle closes the idle connections, and from now on each one given
// back (put): the pool's proxy was replaced.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// upConn is one upstream connection. Its reader takes at most lim bytes
// from the socket while lim >= 0: the response headers' budget.
type upConn struct {
	nc   net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	lim  int64
	used time.Time
	body lenBody // the body of the answer being read (fast.go)
	// The answer being read, when readSimpleResponse takes it: reused
	// from answer to answer.
	resp http.Response
	hdr  http.Header
	strs []string // hdr's values
	// names reads the Connection lines of the heads http.ReadResponse
	// reads (fast.go: readAnswer), while sniff is set.
	names headNames
	sniff bool
	// abort ends the connection's reads and writes at once (the client
	// went away): c.abortNow, bound once, so that watching costs no
	// allocation. aborted holds it against deadlines set after it
	// (setReadDeadline).
	abort   func()
	aborted atomic.Bool
	// While an answer's body streams (watch.go: streamFor): the
	// request's context, until the read deadline set at the request's
	// start makes Read watch its client; then what stops the watch.
	client  context.Context
	unwatch func()
	unabort func() bool
	// While an answer's head is read (watch.go: awaitFor): the request,
	// until the short deadline set at its start (firstWait) makes Read
	// watch its client and wait on until awaitUntil; then what stops
	// that watch.
	await       *http.Request
	awaitUntil  time.Time
	unwatchHead func()
	unabortHead func() bool
	// sc and peek tell whether the socket holds bytes (or an EOF) while
	// the connection is idle (pending); peek is bound once, as abort.
	sc     syscall.RawConn
	peek   func(fd uintptr)
	peeked bool

	// With raw I/O (rawio), the request is held in out while hold is
	// set, and sent by the next Read with rawio.Conn.WriteRead: the
	// answer is then awaited without first reading an empty socket.
	// Only on a connection used within the last second (warm): one the
	// upstream may have half-closed while idle is read at once, so its
	// EOF is seen and the request retried.
	raw  *rawio.Conn
	warm bool
	rdl  time.Time // the read deadline set last (fast.go); zero: none
	hold bool
	out  []byte
}

func (c *upConn) Write(p []byte) (int, error) {
	if c.hold {
		c.out = append(c.out, p...)
		return len(p), nil
	}
	return c.nc.Write(p)
}

var errHeaderTooLarge = errors.New("proxy: the upstream's response headers exceed the limit")

func (c *upConn) Read(p []byte) (int, error) {
	if c.lim >= 0 {
		if c.lim == 0 {
			return 0, errHeaderTooLarge
		}
		if int64(len(p)) > c.lim {
			p = p[:c.lim]
		}
	}
	var n int
	var err error
	if len(c.out) > 0 {
		n, err = c.raw.WriteRead(c.out, p)
		c.out = c.out[:0]
	} else {
		n, err = c.nc.Read(p)
	}
	if n == 0 && err != nil && (c.await != nil || c.client != nil) && isTimeout(err) && !c.aborted.Load() {
		// An answer's head, or its body still streaming, when the
		// deadline set at its request's start passes: its client is
		// watched from now on (watch.go), and the read waits on, for
		// a head until response_header_timeout, for a body without a
		// deadline.
		if c.await != nil {
			c.awaitClient()
		} else {
			c.watchClient()
		}
		n, err = c.nc.Read(p)
	}
	if c.lim >= 0 {
		c.lim -= int64(n)
	}
	if c.sniff && n > 0 {
		c.names.feed(p[:n])
	}
	return n, err
}

// abortNow is c.abort. A connection aborted is never pooled again.
func (c *upConn) abortNow() {
	c.aborted.Store(true)
	c.nc.SetDeadline(time.Unix(1, 0))
}

// setReadDeadline sets c's read deadline to t, unless c was aborted: an
// abort may come (from another goroutine) at any time during a round
// trip, and a deadline set after it must not undo it.
func (c *upConn) setReadDeadline(t time.Time) {
	c.nc.SetReadDeadline(t)
	if c.aborted.Load() {
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// get returns an idle connection (reused: true) or a new one; now is the
// time (the caller's reading, one per request).
func (p *pool) get(ctx context.Context, now time.Time) (c *upConn, reused bool, err error) {
	p.mu.Lock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if idle := now.Sub(c.used); idle < p.idleTimeout {
			p.mu.Unlock()
			if c.pending() {
				// Bytes the upstream sent after its last answer was
				// read whole (or its close): read now, they would be
				// taken for the answer to another client's request.
				// net/http's Transport closes such a connection too
				// ("Unsolicited response received on idle HTTP channel").
				c.nc.Close()
				p.mu.Lock()
				continue
			}
			c.warm = idle < time.Second
			return c, true, nil
		}
		c.nc.Close()
	}
	p.mu.Unlock()
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	c = &upConn{lim: -1, hdr: make(http.Header), warm: true}
	if sc, ok := nc.(syscall.Conn); ok {
		c.sc, _ = sc.SyscallConn()
		c.peek = c.peekFd
	}
	nc = rawio.Wrap(nc)
	c.nc = nc
	c.raw, _ = nc.(*rawio.Conn)
	c.abort = c.abortNow
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(c, 4<<10)
	return c, false, nil
}

// put gives c back, or closes it when the pool is full; now is the time
// its request started (one clock reading per request: after a long
// answer, the connection counts as idle for longer than it was).
// Connections idle for idleTimeout are closed on the way: get takes from
// the top, so the bottom of the pool is where they age.
func (p *pool) put(c *upConn, now time.Time) {
	c.used = now
	var stale []*upConn
	p.mu.Lock()
	n := 0
	for n < len(p.idle) && c.used.Sub(p.idle[n].used) >= p.idleTimeout {
		n++
	}
	if n > 0 {
		stale = append(stale, p.idle[:n]...)
		m := copy(p.idle, p.idle[n:])
		clear(p.idle[m:])
		p.idle = p.idle[:m]
	}
	if len(p.idle) < p.max && !p.closed {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
	for _, s := range stale {
		s.nc.Close()
	}
}
