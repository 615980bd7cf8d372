package listener

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/rawio"
)

// TestUserTimeout: WithUserTimeout sets TCP_USER_TIMEOUT on the
// connections accepted (grpc-go sets its keepalive timeout so only on a
// bare TCP listener's), in milliseconds; without it the system's (0) is
// left.
func TestUserTimeout(t *testing.T) {
	for _, want := range []time.Duration{0, 7 * time.Second} {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln := Wrap(raw, 0, 0, nil).WithUserTimeout(want)
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		tc := sc.(*conn).Conn.(*rawio.Conn).NetConn().(*net.TCPConn)
		rc, err := tc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
		if gerr != nil {
			t.Fatal(gerr)
		}
		if time.Duration(got)*time.Millisecond != want {
			t.Errorf("WithUserTimeout(%v): TCP_USER_TIMEOUT is %dms", want, got)
		}
		c.Close()
		sc.Close()
		ln.Close()
	}
}
