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
		// reading now.
		for len(c.r.first) > 0 {
			w := c.r.first
			if len(w) > maxRW {
				w = w[:maxRW]
			}
			n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&w[0])), uintptr(len(w)))
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return true // WriteRead writes the rest, then reads
			case e != 0:
				c.r.err = os.NewSyscallError("write", e)
				return true
			case n == 0:
				c.r.err = io.ErrUnexpectedEOF
				return true
			}
			c.r.first = c.r.first[n:]
		}
		return false
	}
	p := c.r.p
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
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
			c.r.n = int(n)
		}
		return true
	}
}

// write is called by RawConn.Write with the socket; false: the socket's
// buffer is full, park until it is writable.
func (c *Conn) write(fd uintptr) bool {
	for c.w.n < len(c.w.p) {
		p := c.w.p[c.w.n:]
		if len(p) > maxRW {
			p = p[:maxRW]
		}
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			c.w.err = os.NewSyscallError("write", e)
			return true
		case n == 0:
			c.w.err = io.ErrUnexpectedEOF // as internal/poll
			return true
		}
		c.w.n += int(n)
	}
	return true
}
