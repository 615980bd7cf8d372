package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
}

// newConfigWatcher starts watching the files or directories at paths:
// events from now on are reported by run.
func newConfigWatcher(paths ...string) (*configWatcher, error) {
	cw := &configWatcher{watched: map[string]bool{}}
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
	return cw, nil
}

// sync makes the watched set the directory of the path and that of its
// resolved target.
func (cw *configWatcher) sync() error {
	want := map[string]bool{}
	for _, p := range cw.paths {
		want[filepath.Dir(p)] = true
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			want[filepath.Dir(real)] = true
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			want[p] = true
			if real != "" {
				want[real] = true
			}
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
	return nil
}

// Close stops watching.
func (cw *configWatcher) Close() error { return cw.w.Close() }

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
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-cw.w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if err := cw.sync(); err != nil {
				log.Warn("config watch: cannot follow the config file's directory", "err", err)
			}
			notify()
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
