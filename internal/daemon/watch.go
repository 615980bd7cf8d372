package daemon

import (
	"context"
	"fmt"
	"log/slog"
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

// watchConfig watches the config file at path and sends on changed (without
// blocking: one pending notice is enough) whenever something happened that
// may have changed its content.
//
// It watches directories, not the file: editors save by writing a new file
// and renaming it over the old one, and Kubernetes mounts a ConfigMap as a
// symlink chain (file → ..data/file, ..data → ..2024_…) whose ..data link is
// swapped atomically; a watch on the file itself would be lost after the
// first such replace. Both the directory of path and the directory of the
// file path finally resolves to are watched, re-resolved after every event,
// so a symlink pointing into another directory is followed too. Whether the
// content really changed is decided by the receiver (by content hash).
//
// watchConfig returns when ctx is done, or with an error if the watcher
// cannot be set up.
func watchConfig(ctx context.Context, path string, log *slog.Logger, changed chan<- struct{}) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("daemon: watch %s: %w", path, err)
	}
	defer w.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("daemon: watch %s: %w", path, err)
	}
	watched := map[string]bool{}
	// sync makes the watched set the directory of the path and of its
	// resolved target.
	sync := func() error {
		want := map[string]bool{filepath.Dir(abs): true}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			want[filepath.Dir(real)] = true
		}
		for dir := range want {
			if watched[dir] {
				continue
			}
			if err := w.Add(dir); err != nil {
				return fmt.Errorf("daemon: watch %s: %w", dir, err)
			}
			watched[dir] = true
		}
		for dir := range watched {
			if !want[dir] {
				_ = w.Remove(dir) // it may be gone already
				delete(watched, dir)
			}
		}
		return nil
	}
	if err := sync(); err != nil {
		return err
	}
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if err := sync(); err != nil {
				log.Warn("config watch: cannot follow the config file's directory", "err", err)
			}
			notify()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events: reread the file to be safe.
			log.Warn("config watch error", "err", err)
			notify()
		}
	}
}
