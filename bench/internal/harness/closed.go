package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Closed is a closed-loop load client on an event loop: one OS thread, one
// epoll set holding its keep-alive connections, raw system calls, one
// request in flight per connection, the next sent as soon as the answer
// is in (as wrk runs). Per request it makes a write, a read and its share
// of epoll_wait: a goroutine per connection on Go's netpoller adds a read
// that fails with EAGAIN before each wait, a park and a wake-up, and cost
// about twice the CPU per request on this machine, CPU taken from the
// servers being measured. Build it with NewClosed; Run drives it for a
// while, and may be called again; Close closes the connections.
//
// With Depth > 1 it pipelines (HTTP/1.1): Depth requests in flight per
// connection, answered in order; the answers one read brings in are
// replaced by as many requests in one write, so a read and a write serve
// several requests. That is a different measurement from one request per
// round trip: label its figures so.
type Closed struct {
	// Depth is the requests in flight per connection; 0 or 1: one.
	// Set it before Run.
	Depth int

	conns   []closedConn
	epfd    int
	timeout time.Duration
	events  []unix.EpollEvent
}

type closedConn struct {
	fd   int
	buf  []byte
	got  int
	out  []byte      // the requests of the next write, copied
	sent []time.Time // when each request in flight was sent, oldest first: sent[head:]
	head int
}

// NewClosed connects conns connections, connection i to addrs[i%len(addrs)];
// a request not answered within timeout fails the run.
func NewClosed(addrs []string, conns int, timeout time.Duration) (*Closed, error) {
	if len(addrs) == 0 || conns < 1 {
		return nil, errors.New("closed: no address or no connection")
	}
	l := &Closed{epfd: -1, timeout: timeout, conns: make([]closedConn, conns), events: make([]unix.EpollEvent, conns)}
	for i := range l.conns {
		l.conns[i].fd = -1
	}
	var err error
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	for i := range l.conns {
		if err := l.open(i, addrs[i%len(addrs)]); err != nil {
			l.Close()
			return nil, fmt.Errorf("closed: connect to %s: %w", addrs[i%len(addrs)], err)
		}
	}
	return l, nil
}

func (l *Closed) open(i int, addr string) error {
	sa, family, err := sockaddr(addr)
	if err != nil {
		return err
	}
	fd, err := connectEpoll(family, sa, l.epfd, i)
	if err != nil {
		return err
	}
	l.conns[i] = closedConn{fd: fd, buf: make([]byte, 4096)}
	return nil
}

// Close closes the connections.
func (l *Closed) Close() {
	for i := range l.conns {
		if c := &l.conns[i]; c.fd >= 0 {
			unix.Close(c.fd)
			c.fd = -1
		}
	}
	if l.epfd >= 0 {
		unix.Close(l.epfd)
		l.epfd = -1
	}
}

// Run keeps Depth requests (at least one) in flight on every connection
// for d: next(i) returns connection i's next request (a buffer the caller
// may reuse once next is called again: Run copies it at once), done(i,
// status, body) receives its answers in order (body aliases the
// connection's buffer: valid during the call) and may fail the run. After
// d no new request is sent; Run returns once the ones in flight are
// answered, with the count of answers. An answer must carry a
// Content-Length and keep the connection open.
func (l *Closed) Run(ctx context.Context, d time.Duration, next func(i int) []byte, done func(i, status int, body []byte) error) (int64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	depth := max(l.Depth, 1)
	stop := time.Now().Add(d)
	busy := 0
	var n int64
	// send writes k more requests on connection i, in one write.
	send := func(i, k int, now time.Time) error {
		c := &l.conns[i]
		c.out = c.out[:0]
		c.sent = c.sent[:copy(c.sent, c.sent[c.head:])]
		c.head = 0
		for range k {
			c.out = append(c.out, next(i)...)
			c.sent = append(c.sent, now)
		}
		busy += k
		m, errno := rawWrite(c.fd, c.out)
		switch {
		case errno != 0:
			return fmt.Errorf("write: %w", errno)
		case m < len(c.out):
			return errors.New("closed: short write") // small requests on a socket the server drains: not expected
		}
		return nil
	}
	now := time.Now()
	for i := range l.conns {
		l.conns[i].sent, l.conns[i].head = l.conns[i].sent[:0], 0
		if err := send(i, depth, now); err != nil {
			return n, err
		}
	}
	checked := now
	for busy > 0 {
		k, errno := epollWaitMs(l.epfd, l.events, 100)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return n, fmt.Errorf("epoll_pwait: %w", errno)
		}
		now = time.Now()
		for _, ev := range l.events[:k] {
			i := int(ev.Fd)
			c := &l.conns[i]
			if c.got == len(c.buf) {
				if len(c.buf) > maxBody {
					return n, ErrFraming
				}
				c.buf = append(c.buf, make([]byte, len(c.buf))...)
			}
			m, errno := rawRead(c.fd, c.buf[c.got:])
			switch {
			case errno == unix.EAGAIN || errno == unix.EINTR:
				continue
			case errno != 0:
				return n, fmt.Errorf("read: %w", errno)
			case m == 0:
				return n, io.ErrUnexpectedEOF
			}
			c.got += m
			// Every whole answer in the buffer, in order.
			at, answered := 0, 0
			for at < c.got {
				if c.head == len(c.sent) {
					return n, fmt.Errorf("%w: %d bytes with no request in flight", ErrFraming, c.got-at)
				}
				a, err := parseAnswer(c.buf[at:c.got], nil)
				if err != nil {
					return n, err
				}
				if a.n == 0 {
					break // not all of it yet
				}
				if a.closed {
					return n, fmt.Errorf("%w: the server closes", ErrFraming)
				}
				at += a.n
				n++
				busy--
				answered++
				c.head++
				if err := done(i, a.status, a.body); err != nil {
					return n, err
				}
			}
			c.got = copy(c.buf, c.buf[at:c.got])
			if answered > 0 && now.Before(stop) {
				if err := send(i, answered, now); err != nil {
					return n, err
				}
			}
		}
		if now.Sub(checked) >= 10*time.Millisecond || k == 0 {
			checked = now
			if err := ctx.Err(); err != nil {
				return n, err
			}
			for i := range l.conns {
				if c := &l.conns[i]; c.head < len(c.sent) && now.Sub(c.sent[c.head]) > l.timeout {
					return n, fmt.Errorf("closed: no answer within %v", l.timeout)
				}
			}
		}
	}
	return n, nil
}

// epollWaitMs is epollWait with a timeout in milliseconds.
func epollWaitMs(epfd int, events []unix.EpollEvent, ms int) (int, unix.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), uintptr(ms), 0, 0)
	return int(n), e
}
