package harness

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// newTimerfd is a nonblocking Linux timerfd ticking every period from
// now, on the kernel's high-resolution timer: Go's own timers sleep at
// least a millisecond when the process has nothing else to do, which
// would bunch the requests of a paced schedule.
func newTimerfd(period time.Duration) (int, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("timerfd_create: %w", err)
	}
	ts := unix.NsecToTimespec(int64(period))
	if err := unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("timerfd_settime: %w", err)
	}
	return fd, nil
}
