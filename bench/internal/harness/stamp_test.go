package harness

import (
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// recvStamped reports when the bytes reached the socket, not when they
// were read: the stamp falls between the clock read before the peer's
// write and the one after it (loopback stamps a segment in the sending
// call), though the read comes 5 ms later.
func TestRecvStampedIsArrivalTime(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sa, family, err := sockaddr(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(epfd)
	fd, err := connectEpoll(family, sa, epfd, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(16))
	recv := func() (int, int64) {
		for {
			m, stamp, errno := recvStamped(fd, buf, oob)
			if errno == unix.EAGAIN {
				continue // not in yet
			}
			if errno != 0 {
				t.Fatal(errno)
			}
			return m, stamp
		}
	}
	// The kernel turns receive stamping on for the machine a moment after
	// the first socket asks (a deferred work item): until then segments
	// come unstamped. Wait for a stamped one.
	for {
		if _, err := peer.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, stamp := recv(); stamp != 0 {
			break
		}
		runtime.Gosched()
	}

	t0 := time.Now().UnixNano()
	if _, err := peer.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now().UnixNano()
	time.Sleep(5 * time.Millisecond) // a gap between arrival and read, not a wait for a condition
	m, stamp := recv()
	if string(buf[:m]) != "answer" {
		t.Fatalf("read %q, want %q", buf[:m], "answer")
	}
	if stamp < t0 || stamp > t1 {
		t.Fatalf("stamp %d outside the write's [%d, %d] (read %v after)", stamp, t0, t1, time.Duration(time.Now().UnixNano()-t1))
	}
}

// rxTime maps a wall-clock stamp to time since the start by the clocks'
// offset, and keeps it between the send and the reading.
func TestRxTime(t *testing.T) {
	start := time.Unix(1000, 0)
	l := &pacedLoop{start: start, wallOff: 3000}
	base := start.UnixNano() + 3000
	for _, c := range []struct {
		stamp           int64
		sent, now, want time.Duration
	}{
		{base + 500, 100, 900, 500}, // in range: the stamp
		{base + 50, 100, 900, 100},  // before the send (a clock step): the send
		{base + 950, 100, 900, 900}, // after the reading: the reading
		{0, 100, 900, 900},          // no stamp: the reading
	} {
		if got := l.rxTime(c.stamp, c.sent, c.now); got != c.want {
			t.Errorf("rxTime(%d, %v, %v) = %v, want %v", c.stamp-base, c.sent, c.now, got, c.want)
		}
	}
}
