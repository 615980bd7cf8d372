//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package proxy

import "syscall"

// pending reports whether c's socket holds bytes or an EOF that nobody
// asked for: c is idle, so anything there is not an answer to the request
// about to be sent. One non-blocking peek, no allocation.
func (c *upConn) pending() bool {
	if c.raw != nil {
		// Raw, as its reads are: without entering the runtime's
		// system-call state (one peek per request on the fast path).
		return c.raw.Pending()
	}
	if c.sc == nil {
		return false
	}
	c.peeked = false
	c.sc.Control(c.peek)
	return c.peeked
}

// peekFd is c.peek: anything but "nothing to read yet" — a byte, an EOF
// (n 0 with no error), a reset — makes the connection unfit.
func (c *upConn) peekFd(fd uintptr) {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	c.peeked = err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
}
