package harness

import (
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
