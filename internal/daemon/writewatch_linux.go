package daemon

import (
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// writeWatch tells whether a file is being written in place: a process
// wrote to it (IN_MODIFY, which a truncating open sends too) and has not
// closed it since (IN_CLOSE_WRITE). The directory events the configWatcher
// gets cannot tell a writer that pauses half-way from one that is done;
// these two events of the file itself can. The file is watched by inode,
// through its symlinks, and followed to its new inode when it is replaced.
type writeWatch struct {
	fd   int      // the inotify instance
	f    *os.File // fd, non-blocking: Close ends a Read
	path string

	mu    sync.Mutex
	wd    int       // the watch of the file's inode; -1 for none
	dirty bool      // written to since last closed by a writer
	since time.Time // when it was first written to, while dirty
}

// newWriteWatch watches the file at path; nil if inotify is not to be had
// (the reload then goes by the directory events alone).
func newWriteWatch(path string) *writeWatch {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	w := &writeWatch{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), path: path, wd: -1}
	w.follow()
	return w
}

// follow watches the file now at the path, if it is another inode than the
// one watched (a replaced file: what its writer wrote is whole, or it
// would not have been renamed into place), or none when it is missing.
func (w *writeWatch) follow() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := syscall.InotifyAddWatch(w.fd, w.path, syscall.IN_MODIFY|syscall.IN_CLOSE_WRITE)
	if err != nil {
		wd = -1
	}
	if wd == w.wd {
		return
	}
	if w.wd >= 0 {
		syscall.InotifyRmWatch(w.fd, uint32(w.wd)) // it may be gone with its file
	}
	w.wd, w.dirty = wd, false
}

// writing reports whether the file has been written to and is still open
// for writing, and if so, how long to wait at most before reading it
// anyway: a writer that keeps it open for longer than wait after its
// first write does not hold the reload back for ever.
func (w *writeWatch) writing(now time.Time, wait time.Duration) (bool, time.Duration) {
	if w == nil {
		return false, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dirty {
		return false, 0
	}
	left := w.since.Add(wait).Sub(now)
	return left > 0, left
}

// run reads the file's events until close, and calls changed after each
// batch of them that changed whether the file is being written: with true
// when a writer started writing, with false when it closed the file it
// wrote to (or when that is not known any more).
func (w *writeWatch) run(changed func(writing bool)) {
	if w == nil {
		return
	}
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // closed
		}
		w.mu.Lock()
		was := w.dirty
		lost := false
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&syscall.IN_Q_OVERFLOW != 0:
				// Events lost: whether a writer is still at work is
				// unknown; the directory events decide.
				w.dirty, lost = false, true
			case int(ev.Wd) != w.wd:
			case ev.Mask&syscall.IN_MODIFY != 0:
				if !w.dirty {
					w.dirty, w.since = true, time.Now()
				}
			case ev.Mask&syscall.IN_CLOSE_WRITE != 0:
				if w.dirty {
					w.dirty, lost = false, true // a write, whole
				}
			case ev.Mask&syscall.IN_IGNORED != 0: // the file is gone
				w.wd, w.dirty = -1, false
			}
		}
		now := w.dirty
		w.mu.Unlock()
		if now != was || lost {
			changed(now)
		}
	}
}

// close stops the watch and ends run.
func (w *writeWatch) close() {
	if w != nil {
		w.f.Close()
	}
}
