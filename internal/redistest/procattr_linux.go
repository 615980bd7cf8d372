package redistest

import "syscall"

// procAttr has the kernel kill a server when the thread of the test
// process that started it exits: a test binary that dies without its
// cleanups (a panic, a race report, go test's timeout) leaves no
// redis-server running. Go's threads outlive the goroutines that ran on
// them, so in practice that is when the process exits.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
