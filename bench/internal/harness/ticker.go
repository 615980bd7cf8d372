package harness

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// newTimerfd is a blocking Linux timerfd ticking every period, on the
// kernel's high-resolution timer (Go's own timers sleep at least a
// millisecond when the process has nothing else to do, which would bunch
// the requests of a paced schedule), and the time its ticks count from.
// Its ticks are never early on that start: tick k comes at start + k ×
// period or later, so no request is sent before it is due, whatever
// delays the calling thread.
func newTimerfd(period time.Duration) (int, time.Time, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return -1, time.Time{}, fmt.Errorf("timerfd_create: %w", err)
	}
	// Go's monotonic clock is CLOCK_MONOTONIC: read after start, mono is
	// start or later, and so is every tick counted from it.
	start := time.Now()
	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		unix.Close(fd)
		return -1, time.Time{}, fmt.Errorf("clock_gettime: %w", err)
	}
	first := unix.NsecToTimespec(mono.Nano() + int64(period))
	if err := unix.TimerfdSettime(fd, unix.TFD_TIMER_ABSTIME, &unix.ItimerSpec{Interval: unix.NsecToTimespec(int64(period)), Value: first}, nil); err != nil {
		unix.Close(fd)
		return -1, time.Time{}, fmt.Errorf("timerfd_settime: %w", err)
	}
	return fd, start, nil
}
