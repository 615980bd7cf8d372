package harness

import (
	"net"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The event loop's system calls, made raw (RawSyscall: the runtime is not
// told): the loop thread is locked and only ever waits in epoll_pwait, so
// the runtime's bookkeeping around a blocking call — sysmon taking the P
// away, another thread started to hold it, the loop's thread waking that
// one to take it back — cost more CPU per request than the request's own
// system calls on this machine. The price: this goroutine holds its P
// throughout (the process needs GOMAXPROCS ≥ 2 for anything else to run
// meanwhile), and a stop-the-world waits for the next timer tick.

func epollWait(epfd int, events []unix.EpollEvent) (int, unix.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), ^uintptr(0) /* timeout -1: until an event */, 0, 0)
	return int(n), e
}

func rawRead(fd int, b []byte) (int, unix.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd int, b []byte) (int, unix.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// recvStamped is a non-blocking recvmsg into b that also returns the
// kernel's receive timestamp of the data (SO_TIMESTAMPNS, wall clock, ns;
// 0 if none came), using oob (CmsgSpace(16) bytes) for the control data.
func recvStamped(fd int, b, oob []byte) (int, int64, unix.Errno) {
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	msg := unix.Msghdr{Iov: &iov, Iovlen: 1, Control: &oob[0]}
	msg.SetControllen(len(oob))
	n, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, 0, e
	}
	var stamp int64
	if int(msg.Controllen) >= unix.CmsgSpace(16) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS {
			ts := (*unix.Timespec)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
			stamp = ts.Nano()
		}
	}
	return int(n), stamp, 0
}

// sockaddr resolves addr (host:port, or unix:/PATH for a Unix socket) for
// a raw socket.
func sockaddr(addr string) (sa unix.Sockaddr, family int, err error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return &unix.SockaddrUnix{Name: path}, unix.AF_UNIX, nil
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return &unix.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ip4)}, unix.AF_INET, nil
	}
	return &unix.SockaddrInet6{Port: ta.Port, Addr: [16]byte(ta.IP.To16())}, unix.AF_INET6, nil
}

// connectEpoll connects a stream socket to sa (blocking: loopback or a
// Unix socket), makes it non-blocking, without Nagle's delay on TCP, and
// adds it to the epoll set epfd for reading under the tag i. It returns
// the socket.
func connectEpoll(family int, sa unix.Sockaddr, epfd, i int) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	err = unix.Connect(fd, sa)
	if err == nil && family != unix.AF_UNIX {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err == nil {
		err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)})
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
