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
type Closed struct {
	conns   []closedConn
	epfd    int
	timeout time.Duration
	events  []unix.EpollEvent
}

type closedConn struct {
	fd   int
	buf  []byte
	got  int
	req  []byte    // the request in flight (the caller's buffer)
	sent time.Time // when it was sent; zero: idle
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

// Run keeps a request in flight on every connection for d: next(i)
// returns connection i's next request (a buffer the caller may reuse once
// its answer is given to done), done(i, status, body) receives its answer
// (body aliases the connection's buffer: valid during the call) and may
// fail the run. After d no new request is sent; Run returns once the ones
// in flight are answered, with the count of answers. An answer must carry
// a Content-Length and keep the connection open.
func (l *Closed) Run(ctx context.Context, d time.Duration, next func(i int) []byte, done func(i, status int, body []byte) error) (int64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stop := time.Now().Add(d)
	busy := 0
	var n int64
	send := func(i int, now time.Time) error {
		c := &l.conns[i]
		c.req, c.sent, c.got = next(i), now, 0
		busy++
		m, errno := rawWrite(c.fd, c.req)
		switch {
		case errno != 0:
			return fmt.Errorf("write: %w", errno)
		case m < len(c.req):
			return errors.New("closed: short write") // a small request on an idle socket: not expected
		}
		return nil
	}
	now := time.Now()
	for i := range l.conns {
		if err := send(i, now); err != nil {
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
			if c.sent.IsZero() {
				return n, fmt.Errorf("%w: %d bytes with no request in flight", ErrFraming, c.got)
			}
			a, err := parseAnswer(c.buf[:c.got], nil)
			if err != nil {
				return n, err
			}
			if a.n == 0 {
				continue // not all of it yet
			}
			if a.n < c.got || a.closed {
				return n, fmt.Errorf("%w: more than one answer, or the server closes", ErrFraming)
			}
			n++
			busy--
			c.sent = time.Time{}
			if err := done(i, a.status, a.body); err != nil {
				return n, err
			}
			if now.Before(stop) {
				if err := send(i, now); err != nil {
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
				if c := &l.conns[i]; !c.sent.IsZero() && now.Sub(c.sent) > l.timeout {
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
