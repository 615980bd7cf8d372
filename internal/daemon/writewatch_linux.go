package daemon

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/descriptors"
)

// writeWatch tells whether files are being written in place: a process
// wrote to one (IN_MODIFY, which a truncating open sends too) and has not
// closed it since (IN_CLOSE_WRITE). The directory events the configWatcher
// gets cannot tell a writer that pauses half-way from one that is done;
// these two events of the file itself can. Each path is watched through
// its symlinks, by inode, and followed to its new inode when it is
// replaced; a path that is a directory (of descriptor files) reports the
// writes to the files in it.
type writeWatch struct {
	fd    int             // the inotify instance
	f     *os.File        // fd, non-blocking: Close ends run
	rc    syscall.RawConn // f's: fd is read and watched only through it
	paths []string

	mu       sync.Mutex
	wds      map[int32]bool        // the watches of the paths' inodes
	dirty    map[written]time.Time // written to and not closed since → first write
	followed bool                  // follow has run: a new inode since is a file that appeared
	buf      []byte                // the events read, under mu
	changed  func(writing bool)    // run's; nil before it runs
}

// newWriteWatch watches the files or directories at paths; nil if inotify
// is not to be had (reloads then go by the directory events alone).
func newWriteWatch(paths ...string) *writeWatch {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "inotify")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	w := &writeWatch{fd: fd, f: f, rc: rc, paths: paths,
		wds: map[int32]bool{}, dirty: map[written]time.Time{},
		buf: make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))}
	w.follow()
	return w
}

// follow watches what is now at the paths, and stops watching what is not
// any more: a replaced file is another inode, whole (or it would not have
// been renamed into place), whoever still holds the old one open.
func (w *writeWatch) follow() {
	if w == nil {
		return
	}
	w.rc.Control(func(uintptr) { // not once closed
		w.mu.Lock()
		w.followLocked()
		w.mu.Unlock()
	})
}

// followLocked is follow, with w.mu held and the instance open.
func (w *writeWatch) followLocked() {
	want := map[int32]bool{}
	for _, p := range w.paths {
		wd, err := syscall.InotifyAddWatch(w.fd, p, syscall.IN_MODIFY|syscall.IN_CLOSE_WRITE|syscall.IN_CREATE)
		if err != nil {
			continue
		}
		want[int32(wd)] = true
		if w.followed && !w.wds[int32(wd)] {
			// A file that appeared since (created where it was
			// missing, renamed into place), or a directory, whose
			// files it holds, with a writer still at work: its writes
			// so far came before this watch and so sent no IN_MODIFY.
			// Being written until it is closed (IN_CLOSE_WRITE, which
			// this watch sees), or for the wait at most.
			for _, name := range appearingIn(p) {
				w.dirty[written{int32(wd), name}] = time.Now()
			}
		}
	}
	w.followed = true
	for wd := range w.wds {
		if !want[wd] {
			syscall.InotifyRmWatch(w.fd, uint32(wd)) // it may be gone with its file
			w.forget(wd)
		}
	}
	w.wds = want
}

// forget drops what is known of the writes to watch wd. w.mu is held.
func (w *writeWatch) forget(wd int32) {
	for k := range w.dirty {
		if k.wd == wd {
			delete(w.dirty, k)
		}
	}
}

// written names a file being written: its watch, and its name in the
// watched directory ("" for a watched file).
type written struct {
	wd   int32
	name string
}

// writing reports whether a file has been written to and is still open
// for writing, and if so, how long to wait at most before reading it
// anyway: a writer that keeps a file open for longer than wait after its
// first write does not hold the reload back for ever.
//
// It first follows the paths and takes in every event queued so far
// itself, rather than trust run to have: a reload asked for by another
// watcher (the config file's, whose directory holds a descriptor file
// too) or by the poll may come before run was scheduled, and would read
// a file truncated or created a moment ago, empty or in part.
func (w *writeWatch) writing(now time.Time, wait time.Duration) (bool, time.Duration) {
	if w == nil {
		return false, 0
	}
	var rep report
	var left time.Duration
	w.rc.Control(func(uintptr) { // not once closed: what is known stands
		w.mu.Lock()
		defer w.mu.Unlock()
		w.followLocked()
		rep, _ = w.drainLocked()
	})
	w.mu.Lock()
	for _, since := range w.dirty {
		left = max(left, since.Add(wait).Sub(now))
	}
	changed := w.changed
	w.mu.Unlock()
	if rep.changed && changed != nil {
		changed(rep.writing)
	}
	return left > 0, left
}

// report tells what a drain of the events changed: whether a file is
// being written (writing), and whether that is news to report (changed).
type report struct{ changed, writing bool }

// run reads the events until close, and calls changed after each batch of
// them that changed whether a file is being written: with true when a
// writer started writing one, with false when the last one was closed by
// its writer (or when that is not known any more); and with the state
// after a file was closed by its writer while others are still being
// written. Events read by writing are reported the same way.
func (w *writeWatch) run(changed func(writing bool)) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.changed = changed
	w.mu.Unlock()
	// Read and taken in under w.mu, as writing does: an event read is
	// never pending outside the lock.
	w.rc.Read(func(uintptr) bool {
		w.mu.Lock()
		rep, done := w.drainLocked()
		w.mu.Unlock()
		if rep.changed {
			changed(rep.writing)
		}
		return done // else nothing more to read: wait until there is
	})
}

// drainLocked reads and takes in the events queued until none is left
// (done false), or the instance failed (done true). w.mu is held, inside
// a call of w.rc's, so that fd is open.
func (w *writeWatch) drainLocked() (rep report, done bool) {
	was := len(w.dirty) > 0
	whole := false // a write ended
	for {
		n, err := syscall.Read(w.fd, w.buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			done = err != syscall.EAGAIN
			break
		}
		if w.take(w.buf[:n]) {
			whole = true
		}
	}
	now := len(w.dirty) > 0
	return report{changed: now != was || whole, writing: now}, done
}

// take takes in the events in buf, and reports whether a write ended
// (or whether one is still going on is not known any more). w.mu is held.
func (w *writeWatch) take(buf []byte) (whole bool) {
	for off := 0; off+syscall.SizeofInotifyEvent <= len(buf); {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := nameOf(buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)])
		off += syscall.SizeofInotifyEvent + int(ev.Len)
		key := written{ev.Wd, name}
		switch {
		case ev.Mask&syscall.IN_Q_OVERFLOW != 0:
			// Events lost: whether a writer is still at work is
			// unknown; the directory events decide.
			clear(w.dirty)
			whole = true
		case !w.wds[ev.Wd]:
		case ev.Mask&syscall.IN_IGNORED != 0: // the file is gone
			delete(w.wds, ev.Wd)
			w.forget(ev.Wd)
		case name != "" && !descriptors.Listed(name):
			// In a directory of descriptor files, one that is not
			// read: an editor's swap file, held open for writing
			// while it edits.
		case ev.Mask&syscall.IN_CREATE != 0:
			// A file created in a watched directory: its creator
			// holds it open, empty, until its first write; being
			// written from now until it is closed.
			if ev.Mask&syscall.IN_ISDIR == 0 {
				if _, ok := w.dirty[key]; !ok {
					w.dirty[key] = time.Now()
				}
			}
		case ev.Mask&syscall.IN_MODIFY != 0:
			if _, ok := w.dirty[key]; !ok {
				w.dirty[key] = time.Now()
			}
		case ev.Mask&syscall.IN_CLOSE_WRITE != 0:
			if _, ok := w.dirty[key]; ok {
				delete(w.dirty, key)
				whole = true
			}
		}
	}
	return whole
}

// appearingIn returns, of the file at path, met for the first time, ""
// if it may still be being written (appearing); of a directory, the
// names of the descriptor files in it that may be.
func appearingIn(path string) []string {
	entries, err := os.ReadDir(path)
	if err != nil {
		if appearing(path) {
			return []string{""}
		}
		return nil
	}
	var names []string
	for _, e := range entries {
		if descriptors.Listed(e.Name()) && appearing(filepath.Join(path, e.Name())) {
			names = append(names, e.Name())
		}
	}
	return names
}

// appearing reports whether the regular file at path, met for the first
// time, may still be being written by its creator. Whether any process
// holds it open for writing is what the kernel checks before it grants a
// read lease (fcntl F_SETLEASE, F_RDLCK: EAGAIN while one does): the
// lease is taken and given back at once. A file renamed into place whole
// is open for writing by no one, and is not waited for; one created in
// place and written in part is, whether its first bytes are in or not.
// Where no lease can be had (a file another user owns, without
// CAP_LEASE; a file system without leases), only an empty file is taken
// as being written: a creator yet to write.
func appearing(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if open, err := openForWrite(f); err == nil {
		return open
	}
	return fi.Size() == 0
}

// openForWrite reports whether a process holds the file of f open for
// writing, by trying to take a read lease on it (see appearing), or the
// error that tells it cannot be known so. f is open read-only.
func openForWrite(f *os.File) (open bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	if cerr := rc.Control(func(fd uintptr) {
		for {
			_, err = fcntl(fd, syscall.F_SETLEASE, syscall.F_RDLCK)
			if err != syscall.EINTR {
				break
			}
		}
		if err == nil {
			fcntl(fd, syscall.F_SETLEASE, syscall.F_UNLCK)
		}
	}); cerr != nil {
		return false, cerr
	}
	if err == syscall.EAGAIN {
		return true, nil
	}
	return false, err
}

// fcntl is fcntl(2) with an int argument.
func fcntl(fd uintptr, cmd, arg int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, uintptr(cmd), uintptr(arg))
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

// nameOf returns the NUL-padded name of an inotify event.
func nameOf(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// close stops the watch and ends run.
func (w *writeWatch) close() {
	if w != nil {
		w.f.Close()
	}
}
