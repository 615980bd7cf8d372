package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults of the config file watcher.
const (
	// DefaultReloadDebounce is how long the watcher waits for a burst of
	// file events to go quiet before it reloads.
	DefaultReloadDebounce = 100 * time.Millisecond
	// maxDebounceFactor bounds how long a never-ending burst can postpone a
	// reload: at most this many debounce periods after its first event.
	maxDebounceFactor = 10
	// watchPoll is how often the watcher also looks at the watched paths
	// itself (inode, size, modification time, and a directory's entries),
	// and reports a change it sees: inotify can lose a watch (a directory
	// deleted and made again in a race with its events, a queue
	// overflow), and some filesystems (NFS, many FUSE mounts) send no
	// events at all.
	watchPoll = 2 * time.Second
	// maxWriteWait bounds how long a reload waits for a process that
	// writes the config file in place to close it (see writeWatch),
	// counted from its first write.
	maxWriteWait = 30 * time.Second
)

// debounce calls fire once in quiet periods: after an event arrives on in,
// fire runs when no further event has arrived for delay, or at the latest
// maxDebounceFactor×delay after the first event of the burst. It returns
// when ctx is done. Timers come from package time, so tests drive it with
// testing/synctest.
func debounce(ctx context.Context, in <-chan struct{}, delay time.Duration, fire func()) {
	if delay <= 0 {
		delay = DefaultReloadDebounce
	}
	timer := time.NewTimer(delay)
	timer.Stop()
	defer timer.Stop()
	var (
		pending bool
		first   time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-in:
			now := time.Now()
			if !pending {
				pending, first = true, now
			}
			wait := delay
			if deadline := first.Add(maxDebounceFactor * delay); now.Add(wait).After(deadline) {
				wait = deadline.Sub(now)
			}
			timer.Reset(wait)
		case <-timer.C:
			pending = false
			fire()
		}
	}
}

// configWatcher watches a config file and reports whatever may have
// changed its content.
//
// It watches directories, not the file: editors save by writing a new file
// and renaming it over the old one, and Kubernetes mounts a ConfigMap as a
// symlink chain (file → ..data/file, ..data → ..2024_…) whose ..data link is
// swapped atomically; a watch on the file itself would be lost after the
// first such replace. Both the directory of the path and the directory of
// the file it finally resolves to are watched, re-resolved after every
// event, so a symlink pointing into another directory is followed too.
// Whether the content really changed is for the receiver to decide (by
// content hash).
//
// A path may also name a directory (the Envoy descriptor files): then the
// directory itself is watched too, and its resolved target, so that a file
// written, added or removed inside it, or a ConfigMap's ..data swap, is
// reported.
type configWatcher struct {
	paths   []string // absolute
	w       *fsnotify.Watcher
	watched map[string]bool
	poll    time.Duration // watchPoll; tests shorten it
	seen    string        // the paths' signature when last reported
	writes  *writeWatch   // the file's writers (see watchWrites); nil if not watched
	// writeWait is maxWriteWait; tests shorten it.
	writeWait time.Duration
}

// watchWrites also watches who writes to the files watched (or to the
// files in a directory watched), so that writing can tell a file being
// written in place from one whose writer is done. Not fatal: without it,
// the directory events decide.
func (cw *configWatcher) watchWrites() {
	cw.writes, cw.writeWait = newWriteWatch(cw.paths...), maxWriteWait
}

// writing reports whether a process wrote to a file in place and still
// has it open, and if so, for how long more to wait for it at most (see
// maxWriteWait). A reload then would read half of what is being written.
func (cw *configWatcher) writing() (bool, time.Duration) {
	if cw == nil {
		return false, 0
	}
	return cw.writes.writing(time.Now(), cw.writeWait)
}

// maxReads bounds how many times a reload reads its files when they
// change while it reads them (see still): past it, the reload waits for
// the next change, which the watcher reports.
const maxReads = 3

// look returns what the files of cw are now (signature), for still to
// compare once they are read; "" for no watcher.
func (cw *configWatcher) look() string {
	if cw == nil {
		return ""
	}
	return cw.signature()
}

// still reports whether the files of cw are as look found them (sig) and
// none is being written in place: what was read since is what the check
// before the read (writing) found whole. Not when a file was replaced (a
// second remove-and-create after that check: read half-written, or
// another file than the one checked) or written to since. True for no
// watcher: nothing is known.
func (cw *configWatcher) still(sig string) bool {
	if cw == nil {
		return true
	}
	if writing, _ := cw.writing(); writing {
		return false
	}
	return cw.signature() == sig
}

// How a checked read ended (see readChecked).
type readEnd int

const (
	// readWhole: read, and the files are still what the check before
	// the read found whole.
	readWhole readEnd = iota
	// readWriting: a file was being written in place at the check:
	// nothing read.
	readWriting
	// readChanging: replaced or written to while read, maxReads times
	// over: what was read may be half of a file.
	readChanging
)

// readChecked reads files that a writer may be at work on, as every
// reload does: it looks at them (look), checks that none is being
// written in place (writing), calls read, and checks that they are still
// as it looked (still). If not (one replaced after the check, removed
// and created again, its creator at work, or written to since), what was
// read may be the first part of a file: it reads again, checked again,
// up to maxReads times. An error from read ends it at once, as read
// (readWhole): nothing was read to check. A nil look, writing or still
// is not asked (nothing is known). checkedHook, if set, is called with
// what between the check and each read.
func readChecked(what string, look func() string, writing func() bool, still func(sig string) bool, read func() error) readEnd {
	for reads := 1; ; reads++ {
		var sig string
		if look != nil {
			sig = look()
		}
		if writing != nil && writing() {
			return readWriting
		}
		if checkedHook != nil {
			checkedHook(what)
		}
		if err := read(); err != nil || still == nil || still(sig) {
			return readWhole
		}
		if reads == maxReads {
			return readChanging
		}
	}
}

// checkedRead is readChecked over the files of cw (none known for nil),
// for a read whose errors are its caller's to handle: a file read half
// may not load, and is read again as any other.
func (cw *configWatcher) checkedRead(what string, read func()) readEnd {
	writing := func() bool { w, _ := cw.writing(); return w }
	return readChecked(what, cw.look, writing, cw.still, func() error { read(); return nil })
}

// newConfigWatcher starts watching the files or directories at paths:
// events from now on are reported by run.
func newConfigWatcher(paths ...string) (*configWatcher, error) {
	cw := &configWatcher{watched: map[string]bool{}, poll: watchPoll}
	for _, path := range paths {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("daemon: watch %s: %w", path, err)
		}
		cw.paths = append(cw.paths, abs)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("daemon: watch %v: %w", paths, err)
	}
	cw.w = w
	if err := cw.sync(); err != nil {
		w.Close()
		return nil, err
	}
	cw.seen = cw.signature()
	return cw, nil
}

// signature describes what the paths hold now, as far as a stat tells:
// each path's inode, size and modification time after symlinks, or that
// it is missing, and for a directory the same of each entry. A change of
// content shows as a change here but for a write that keeps the size
// within one tick of the file system's clock, which the events report.
func (cw *configWatcher) signature() string {
	var b strings.Builder
	stat := func(name, p string) (os.FileInfo, bool) {
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(&b, "%s missing\n", name)
			return nil, false
		}
		fmt.Fprintf(&b, "%s %d %d %d %v\n", name, inode(fi), fi.Size(), fi.ModTime().UnixNano(), fi.IsDir())
		return fi, true
	}
	for _, p := range cw.paths {
		fi, ok := stat(p, p)
		if !ok || !fi.IsDir() {
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			fmt.Fprintf(&b, "%s unreadable\n", p)
			continue
		}
		for _, e := range entries {
			stat(e.Name(), filepath.Join(p, e.Name()))
		}
	}
	return b.String()
}

// sync makes the watched set the directories that hold the paths, their
// resolved targets, and every symlink met on the way to them (see
// watchDirs).
func (cw *configWatcher) sync() error {
	want := map[string]bool{}
	for _, p := range cw.paths {
		for _, dir := range watchDirs(p) {
			want[dir] = true
		}
	}
	for dir := range want {
		if cw.watched[dir] {
			continue
		}
		if err := cw.w.Add(dir); err != nil {
			return fmt.Errorf("daemon: watch %s: %w", dir, err)
		}
		cw.watched[dir] = true
	}
	for dir := range cw.watched {
		if !want[dir] {
			_ = cw.w.Remove(dir) // it may be gone already
			delete(cw.watched, dir)
		}
	}
	cw.writes.follow() // a replaced file is another inode
	return nil
}

// maxLinks bounds the symlinks followed when resolving a path, as the
// kernel does (ELOOP).
const maxLinks = 255

// watchDirs returns the real directories (no symlink in them) where a
// change can change what the absolute path p reads: the directory of each
// symlink met while resolving p component by component, wherever it is on
// the path (a Kubernetes ConfigMap swaps ..data in the file's own
// directory; a release layout swaps a link to the whole directory, as
// current -> releases/N, in the directory above), and the directory
// holding the resolved target, or the target itself when it is a
// directory. The directories are returned resolved, so that after a swap
// the new target's directory is a new name to watch: inotify follows a
// link once, when the watch is added, and would keep watching the old
// target under the link's name. When a component does not exist (the file
// mid-replace), the deepest existing directory is watched, so that its
// creation is seen.
func watchDirs(p string) []string {
	var dirs []string
	cur := string(filepath.Separator) // resolved so far: a real directory
	rest := splitPath(p)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return append(dirs, cur) // missing: watch where it would appear
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			dirs = append(dirs, cur)
			links++
			target, err := os.Readlink(next)
			if err != nil || links > maxLinks {
				return dirs
			}
			if filepath.IsAbs(target) {
				cur = string(filepath.Separator)
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		if len(rest) == 0 {
			// The resolved target: watch its directory, and the target
			// itself when it is a directory of descriptor files.
			dirs = append(dirs, cur)
			if fi.IsDir() {
				dirs = append(dirs, next)
			}
			return dirs
		}
		if !fi.IsDir() {
			return append(dirs, cur) // a file in the middle: nothing below it
		}
		cur = next
	}
	// p resolved to a directory through a trailing "..", "." or the root.
	return append(dirs, cur)
}

// splitPath returns the components of p, separated by the separator.
func splitPath(p string) []string {
	return strings.Split(p, string(filepath.Separator))
}

// Close stops watching.
func (cw *configWatcher) Close() error {
	cw.writes.close()
	return cw.w.Close()
}

// run sends on changed (without blocking: one pending notice is enough)
// after every event that may have changed the file, until ctx is done or
// the watcher is closed.
func (cw *configWatcher) run(ctx context.Context, log *slog.Logger, changed chan<- struct{}) {
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	// followed follows whatever changed: the directories to watch, the
	// paths' signature, and a notice.
	followed := func(sig string) {
		if err := cw.sync(); err != nil {
			log.Warn("config watch: cannot follow the config file's directory", "err", err)
		}
		cw.seen = sig
		notify()
	}
	if cw.writes != nil {
		// A writer closing the file it wrote to in place is a change
		// too: a reload put off while it wrote is tried again.
		done := make(chan struct{})
		go func() {
			cw.writes.run(func(writing bool) {
				if !writing {
					notify()
				}
			})
			close(done)
		}()
		defer func() { cw.writes.close(); <-done }()
	}
	tick := time.NewTicker(cw.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// The fallback: a change no event reported (see watchPoll).
			if sig := cw.signature(); sig != cw.seen {
				followed(sig)
			}
		case ev, ok := <-cw.w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if cw.watched[ev.Name] && (ev.Op.Has(fsnotify.Remove) || ev.Op.Has(fsnotify.Rename)) {
				// A watched directory moved or went: inotify (and
				// fsnotify with it) dropped its watch. Forget it, so
				// that sync watches what is at its path now, or the
				// directory above until it is back.
				delete(cw.watched, ev.Name)
			}
			followed(cw.signature())
		case err, ok := <-cw.w.Errors:
			if !ok {
				return
			}
			// An overflow loses events: reread the file to be safe.
			log.Warn("config watch error", "err", err)
			notify()
		}
	}
}
