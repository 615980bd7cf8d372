package harness

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A ticker wakes Paced's dispatcher every period after its start; wait
// blocks until the next tick and returns how many ticks passed since the
// previous wait (more than one when the dispatcher was late).
type ticker interface {
	wait() (int64, error)
	Close() error
}

// timerfdTicker is a periodic Linux timerfd read through Go's poller:
// the kernel wakes the dispatcher on its high-resolution timer, not on
// Go's timers, which sleep at least a millisecond when nothing else runs.
type timerfdTicker struct {
	f   *os.File
	buf [8]byte
}

func newTimerfdTicker(_ time.Time, period time.Duration) (ticker, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	ts := unix.NsecToTimespec(int64(period))
	if err := unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("timerfd_settime: %w", err)
	}
	return &timerfdTicker{f: os.NewFile(uintptr(fd), "timerfd")}, nil
}

func (t *timerfdTicker) wait() (int64, error) {
	if _, err := t.f.Read(t.buf[:]); err != nil {
		return 0, err
	}
	return int64(binary.NativeEndian.Uint64(t.buf[:])), nil
}

func (t *timerfdTicker) Close() error { return t.f.Close() }

// sleepTicker ticks on Go's timers (time.Sleep): portable, and fake time
// under testing/synctest, but a millisecond coarse on an idle process.
type sleepTicker struct {
	start  time.Time
	period time.Duration
	ticks  int64
}

func newSleepTicker(start time.Time, period time.Duration) (ticker, error) {
	return &sleepTicker{start: start, period: period}, nil
}

func (t *sleepTicker) wait() (int64, error) {
	if d := time.Duration(t.ticks+1)*t.period - time.Since(t.start); d > 0 {
		time.Sleep(d)
	}
	now := int64(time.Since(t.start) / t.period)
	k := now - t.ticks
	t.ticks = now
	return k, nil
}

func (t *sleepTicker) Close() error { return nil }
