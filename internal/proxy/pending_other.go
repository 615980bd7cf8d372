//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package proxy

// pending: no non-blocking peek here; an idle connection is taken as it
// is (see pending_unix.go).
func (c *upConn) pending() bool { return false }

func (c *upConn) peekFd(fd uintptr) {}
