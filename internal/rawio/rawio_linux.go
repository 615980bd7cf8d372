package rawio

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

const supported = true

// maxRW bounds one system call's bytes, as internal/poll does.
const maxRW = 1 << 30

// read is called by RawConn.Read with the socket; false: nothing to read
// yet, park until it is readable.
func (c *Conn) read(fd uintptr) bool {
	if len(c.r.first) > 0 {
		// WriteRead: write first, then wait for readability (the
		// poller's readiness was reset before this call) instead of
		// reading now. A full buffer: WriteRead writes the rest, then
		// reads.
		rest, full, err := writeRaw(fd, c.r.first)
		c.r.first, c.r.err = rest, err
		return err != nil || full
	}
	p := c.r.p
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	for {
		n, e := sysRead(fd, p)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			c.r.err = os.NewSyscallError("read", e)
		case n == 0:
			c.r.err = io.EOF
		default:
			c.r.n = n
		}
		return true
	}
}

// peekFd is Pending's peek: anything but "nothing to read yet" makes the
// socket pending.
func (c *Conn) peekFd(fd uintptr) {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		c.pending = e != syscall.EAGAIN
		return
	}
}

// write is called by RawConn.Write with the socket; false: the socket's
// buffer is full, park until it is writable.
func (c *Conn) write(fd uintptr) bool {
	rest, full, err := writeRaw(fd, c.w.p[c.w.n:])
	c.w.n, c.w.err = len(c.w.p)-len(rest), err
	return err != nil || !full
}

// writeNow is write for WriteNow: done whether or not the socket took
// all of it.
func (c *Conn) writeNow(fd uintptr) bool {
	c.write(fd)
	return true
}

// writeSome is write for WriteSome: done once any of it is written.
func (c *Conn) writeSome(fd uintptr) bool {
	before := c.w.n
	c.write(fd)
	return c.w.err != nil || c.w.n > before || c.w.n == len(c.w.p)
}

// writeRaw writes p to the socket fd until it is all written (rest
// empty), the socket's buffer is full (full: rest is what is left), or an
// error.
func writeRaw(fd uintptr, p []byte) (rest []byte, full bool, err error) {
	for len(p) > 0 {
		w := p
		if len(w) > maxRW {
			w = w[:maxRW]
		}
		n, e := sysWrite(fd, w)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return p, true, nil
		case e != 0:
			return p, false, os.NewSyscallError("write", e)
		case n == 0:
			return p, false, io.ErrUnexpectedEOF // as internal/poll
		}
		p = p[n:]
	}
	return p, false, nil
}
