//go:build linux && race

package rawio

import "syscall"

// Under the race detector, sysRead and sysWrite go through package
// syscall's Read and Write, which tell the detector what a raw system
// call cannot: a write happens before the reads that follow it (whoever
// reads, on whatever socket — the answer to a request can only come
// after it), and the buffers' bytes are read or written. Without it, a
// client that writes a request in one goroutine and reads the answer in
// another, then uses the request's memory again, was reported as a race
// (TestWriteHappensBeforeRead). They enter the system-call state, which
// costs nothing that matters under -race.
func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errnoOf(err)
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return n, errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
