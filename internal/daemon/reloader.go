package daemon

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"

	"github.com/sluicehq/sluice/internal/config"
)

// reloader serialises reloads of one config file: it reads the file, skips
// content it has already tried (by SHA-256), applies the rest, and logs,
// counts and reports each attempt.
type reloader struct {
	path   string
	apply  func(data []byte) error
	log    *slog.Logger
	count  func(ok bool)
	notify func(ReloadResult) // may be nil

	mu       sync.Mutex
	lastHash [sha256.Size]byte // content last tried, applied or refused
	failed   bool              // the last attempt was refused
	waiting  bool              // put off since the last attempt (logged once)
	missing  bool              // found missing since it was last read (logged once)
}

// newReloader returns a reloader whose last-tried content is the one whose
// SHA-256 is initial (the content the daemon started with), so the first
// event that changes nothing reloads nothing.
func newReloader(path string, initial [sha256.Size]byte, apply func([]byte) error, log *slog.Logger, count func(bool), notify func(ReloadResult)) *reloader {
	return &reloader{path: path, apply: apply, log: log, count: count, notify: notify, lastHash: initial}
}

// reload rereads the file and applies it if its content changed since the
// last attempt, or always when force is set.
func (r *reloader) reload(force bool) ReloadResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.try(force)
}

// putOff reports a watcher-triggered reload put off while the file is
// being written in place (see configWatcher.writing).
func (r *reloader) putOff() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.waiting {
		r.log.Info("config file is being written in place: waiting for its writer to close it", "file", r.path)
		r.waiting = true
	}
	if r.notify != nil {
		r.notify(ReloadResult{Writing: true})
	}
}

// retryFailed tries the file again, unchanged or not, if the last attempt
// was refused: the files it reads besides the config (the Envoy
// descriptor files) may have been fixed since. It reports whether it
// tried.
func (r *reloader) retryFailed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failed {
		return false
	}
	r.try(true)
	return true
}

// try makes an attempt, remembers whether it was refused, and reports it.
func (r *reloader) try(force bool) ReloadResult {
	r.waiting = false
	res := r.attempt(force)
	if !res.Unchanged && !res.Missing {
		r.failed = res.Err != nil
	}
	if r.notify != nil {
		r.notify(res)
	}
	return res
}

func (r *reloader) attempt(force bool) ReloadResult {
	data, err := config.ReadFile(r.path)
	if err != nil && !force && missing(r.path) {
		// Deleted before it is written again, or a ..data swap to a
		// version without it: the watcher reports its return (an event
		// in the directory, or its 2 s look), so wait for that, as long
		// as it takes, saying so once; the running config stays.
		if !r.missing {
			r.log.Warn("config file is missing: the running config stays; it is reloaded when the file is back", "file", r.path)
			r.missing = true
		}
		return ReloadResult{Missing: true}
	}
	if err != nil && !force {
		// Missing when opened, back when looked at: read it as it is now.
		data, err = config.ReadFile(r.path)
	}
	if err == nil && !force && r.missing && len(data) == 0 {
		// Made again by a writer yet to write (rm f; gen > f): an
		// empty config is no one's, and the writes to come are seen
		// as any in place. Still waiting, nothing more to say.
		return ReloadResult{Missing: true}
	}
	r.missing = false
	if err != nil {
		err = fmt.Errorf("daemon: reload %s: %w", r.path, err)
		r.refused(err)
		return ReloadResult{Err: err}
	}
	h := sha256.Sum256(data)
	if !force && h == r.lastHash {
		r.log.Debug("config file touched, content unchanged: not reloading", "file", r.path)
		return ReloadResult{Unchanged: true}
	}
	r.lastHash = h
	if err := r.apply(data); err != nil {
		if errors.Is(err, ErrShuttingDown) {
			r.log.Info("config not reloaded: shutting down", "file", r.path)
			return ReloadResult{Err: err}
		}
		r.refused(err)
		return ReloadResult{Err: err}
	}
	r.count(true)
	r.log.Info("config reloaded", "file", r.path)
	return ReloadResult{}
}

// missing reports whether nothing is at path, or a symlink to nothing.
func missing(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// refused logs and counts a refused reload. Each problem of a config error
// is logged on its own line (FILE:LINE: KEY: MSG).
func (r *reloader) refused(err error) {
	r.count(false)
	var ce config.Errors
	if errors.As(err, &ce) {
		for _, e := range ce {
			r.log.Error("config reload refused; the old config stays", "file", r.path, "problem", e.Error())
		}
		return
	}
	r.log.Error("config reload refused; the old config stays", "file", r.path, "err", err)
}
