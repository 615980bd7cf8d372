package harness

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// pacedLoop is Paced's engine: one OS thread, raw system calls, as wrk
// runs, woken by a periodic timerfd and by nothing else. At each tick it
// collects the answers that arrived since the last one (epoll_wait with
// no timeout over the pool's sockets), each timed by the kernel's receive
// timestamp (SO_TIMESTAMPNS: when its last segment reached the socket,
// not when this loop read it), and sends the requests due. An answer
// therefore costs no wake-up of its own: on these shared cores the
// generator's wake-ups were its largest cost (two per request, 25–30 µs
// of CPU per request against wrk's 13), CPU taken from the servers being
// measured. Go's netpoller (a parked goroutine per connection, a read
// that fails with EAGAIN before each wait, the scheduler's wake-ups)
// cost more still.
type pacedLoop struct {
	ctx      context.Context
	req      []byte
	timeout  time.Duration
	sa       unix.Sockaddr
	family   int
	epfd     int
	tfd      int
	conns    []rawConn
	free     []int // indexes of idle connections
	start    time.Time
	wallOff  int64 // wall clock minus monotonic since start, ns, at the last tick (rxTime)
	oob      []byte
	interval time.Duration // between two requests
	period   time.Duration // between two timer ticks
	n        int64         // requests in the schedule

	lat, lag  []int64 // per request, ns (never negative: see newTimerfd); lat failed if it failed
	ticks     int64   // timer ticks so far
	wakeups   int64   // timer reads so far
	due, next int64   // requests due so far; the next one to send
	busy      int     // connections with a request in flight
	errors    int64
	non2xx    int64
	firstErr  error
	last      time.Duration // the latest answer, since start
	checked   time.Duration // the last timeout and ctx check, since start
}

// failed marks a request that failed in pacedLoop.lat.
const failed = math.MinInt64

// rawConn is one keep-alive connection of the pool.
type rawConn struct {
	fd   int // -1 once it cannot be reopened
	buf  []byte
	got  int           // bytes received in buf
	slot int64         // the request in flight, -1 if idle
	sent time.Duration // when it was sent, since start
}

func newPacedLoop(ctx context.Context, o PacedOptions, interval, period time.Duration, n int64) (*pacedLoop, error) {
	sa, family, err := sockaddr(o.Addr)
	if err != nil {
		return nil, err
	}
	l := &pacedLoop{ctx: ctx, req: o.Request, timeout: o.Timeout, epfd: -1, tfd: -1, sa: sa, family: family,
		interval: interval, period: period, n: n, lat: make([]int64, n), lag: make([]int64, n),
		oob: make([]byte, unix.CmsgSpace(16))}
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	l.conns = make([]rawConn, o.Conns)
	for i := range l.conns {
		l.conns[i] = rawConn{fd: -1, buf: make([]byte, 4096), slot: -1}
		if err := l.open(i); err != nil {
			l.close()
			return nil, fmt.Errorf("paced: connect to %s: %w", o.Addr, err)
		}
	}
	return l, nil
}

// open connects connection i (blocking: loopback) and adds it to the
// epoll set and the idle ones.
func (l *pacedLoop) open(i int) error {
	c := &l.conns[i]
	fd, err := connectEpoll(l.family, l.sa, l.epfd, i)
	if err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(fd)
		return fmt.Errorf("SO_TIMESTAMPNS: %w", err)
	}
	c.fd, c.got, c.slot = fd, 0, -1
	l.free = append(l.free, i)
	return nil
}

// reopen closes connection i and opens it again; a connection that cannot
// be reopened stays out of the pool.
func (l *pacedLoop) reopen(i int) {
	c := &l.conns[i]
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	if err := l.open(i); err != nil {
		l.fail(fmt.Errorf("reconnect: %w", err))
	}
}

func (l *pacedLoop) close() {
	for _, c := range l.conns {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
	}
	for _, fd := range []int{l.tfd, l.epfd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func (l *pacedLoop) fail(err error) {
	l.errors++
	if l.firstErr == nil {
		l.firstErr = err
	}
}

// finish records the end of connection i's request at now: answered with
// status, or failed with err (then the connection is reopened).
func (l *pacedLoop) finish(i int, now time.Duration, status int, err error) {
	c := &l.conns[i]
	s := c.slot
	c.slot = -1
	l.busy--
	l.last = max(l.last, now)
	if err != nil {
		l.lat[s] = failed
		l.fail(err)
		l.reopen(i)
		return
	}
	l.lat[s] = int64(now - l.dueAt(s))
	if status/100 != 2 && status/100 != 3 {
		l.non2xx++
	}
}

// dueAt is when request s is due: (s+1) intervals after the start.
func (l *pacedLoop) dueAt(s int64) time.Duration { return time.Duration(s+1) * l.interval }

// run is the event loop, on its own OS thread, until every request of the
// schedule has been sent and has ended. It sleeps only in the timer's
// read: a tick every period, whatever the answers do.
func (l *pacedLoop) run() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var err error
	if l.tfd, l.start, err = newTimerfd(l.period); err != nil {
		return err
	}
	events := make([]unix.EpollEvent, len(l.conns))
	for l.next < l.n || l.busy > 0 {
		if l.busy == 0 && len(l.free) == 0 {
			return fmt.Errorf("paced: no connection left: %w", l.firstErr)
		}
		var b [8]byte
		m, errno := rawRead(l.tfd, b[:]) // blocks until the next tick
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || m != 8 {
			return fmt.Errorf("timerfd read: %d bytes, %w", m, errno)
		}
		l.wakeups++
		t := time.Now()
		now := t.Sub(l.start)
		l.wallOff = t.UnixNano() - l.start.UnixNano() - int64(now)
		if err := l.tick(now, binary.LittleEndian.Uint64(b[:])); err != nil {
			return err
		}
		k, errno := epollWaitMs(l.epfd, events, 0)
		if errno != 0 && errno != unix.EINTR {
			return fmt.Errorf("epoll_pwait: %w", errno)
		}
		for _, ev := range events[:max(k, 0)] {
			l.readable(int(ev.Fd), now)
		}
		l.dispatch()
	}
	return nil
}

// tick counts n more timer ticks: the requests due by now; every 10 ms
// it also looks for requests past their timeout and for the context's
// end.
func (l *pacedLoop) tick(now time.Duration, n uint64) error {
	l.ticks += int64(n)
	l.due = min(l.n, int64(time.Duration(l.ticks)*l.period/l.interval))
	if now-l.checked < 10*time.Millisecond {
		return nil
	}
	l.checked = now
	if err := l.ctx.Err(); err != nil {
		return err
	}
	for i := range l.conns {
		if c := &l.conns[i]; c.slot >= 0 && now-c.sent > l.timeout {
			l.finish(i, now, 0, fmt.Errorf("no answer within %v", l.timeout))
		}
	}
	return nil
}

// readable reads what connection i received, and ends its request if
// that completes the answer, at the time the kernel received the bytes
// (rxTime), read at the tick of now.
func (l *pacedLoop) readable(i int, now time.Duration) {
	c := &l.conns[i]
	if c.fd < 0 {
		return
	}
	if c.got == len(c.buf) {
		if len(c.buf) > maxBody {
			l.finish(i, now, 0, ErrFraming)
			return
		}
		c.buf = append(c.buf, make([]byte, len(c.buf))...)
	}
	m, stamp, errno := recvStamped(c.fd, c.buf[c.got:], l.oob)
	if errno == unix.EAGAIN || errno == unix.EINTR {
		return
	}
	at := l.rxTime(stamp, c.sent, now)
	var err error
	switch {
	case errno != 0:
		err = errno
	case m == 0:
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		if c.slot >= 0 {
			l.finish(i, at, 0, err)
		} else { // an idle connection the server closed
			l.reopen(i)
		}
		return
	}
	c.got += m
	if c.slot < 0 {
		l.fail(fmt.Errorf("%w: %d bytes with no request in flight", ErrFraming, c.got))
		l.reopen(i)
		return
	}
	a, err := parseAnswer(c.buf[:c.got], nil)
	if err != nil || a.n == 0 {
		if err != nil {
			l.finish(i, at, 0, err)
		}
		return
	}
	l.finish(i, at, a.status, nil)
	if a.n < c.got || a.closed { // more than one answer, or the server closes
		l.reopen(i)
		return
	}
	c.got = 0
	l.free = append(l.free, i)
}

// rxTime is a receive timestamp (wall clock, ns; 0 if none came) as time
// since the start on the monotonic clock, by the two clocks' offset at
// the current tick; it is kept between the request's send and now, so a
// missing stamp or a step of the wall clock cannot make a latency
// negative or later than its reading. With no stamp it is the reading
// (the kernel turns stamping on a moment after the first socket asks, so
// the first answers of a run may come unstamped: later by up to a tick).
func (l *pacedLoop) rxTime(stamp int64, sent, now time.Duration) time.Duration {
	if stamp == 0 {
		return now
	}
	return min(max(time.Duration(stamp-l.start.UnixNano()-l.wallOff), sent), now)
}

// dispatch sends the requests due, each on an idle connection, in order.
func (l *pacedLoop) dispatch() {
	for l.next < l.due && len(l.free) > 0 {
		i := l.free[len(l.free)-1]
		l.free = l.free[:len(l.free)-1]
		c := &l.conns[i]
		s := l.next
		l.next++
		c.slot, c.sent = s, time.Since(l.start)
		l.lag[s] = int64(c.sent - l.dueAt(s))
		l.busy++
		m, errno := rawWrite(c.fd, l.req)
		if errno != 0 {
			l.finish(i, c.sent, 0, errno)
		} else if m < len(l.req) {
			l.finish(i, c.sent, 0, errors.New("short write"))
		}
	}
}
