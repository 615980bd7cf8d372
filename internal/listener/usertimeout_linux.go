package listener

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT on c when it is a TCP connection:
// the kernel then drops the connection once data it sent has gone
// unacknowledged for d (a peer gone without a FIN or RST), rather than
// after its retransmissions give up (about 15 minutes).
func setUserTimeout(c net.Conn, d time.Duration) error {
	tc, ok := c.(*net.TCPConn)
	if !ok || d <= 0 {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}
