//go:build unix

package benchutil

import (
	"syscall"
	"time"
)

// CPUTime is this process's user and system CPU time, all threads
// (getrusage); 0 if it cannot be read.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
