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
	apply  func(data []byte, still func() bool) error
	log    *slog.Logger
	count  func(ok bool)
	notify func(ReloadResult) // may be nil
	// writing reports whether the file is being written in place (see
	// configWatcher.writing); nil: never known to be.
	writing func() bool
	// look and still tell whether the file read is the one writing
	// checked, whole (see configWatcher.still); nil: never known.
	look  func() string
	still func(sig string) bool
	// named digests the other files a reload reads (Daemon.namedDigest);
	// nil: a refused config is tried again whenever it is asked for.
	named func() [sha256.Size]byte
	// namedWriting reports whether one of those files is being written
	// in place (Daemon.namedWriting); nil: never known to be.
	namedWriting func() bool
	// namedLook and namedStill tell whether those files are, once read,
	// as they were when namedWriting checked them (Daemon.namedLook,
	// Daemon.namedStill); nil: never known.
	namedLook  func() string
	namedStill func(sig string) bool
	// namedGone returns one of those files that is missing and that the
	// config in data, about to be read, names too (any, for nil data), or
	// "" (Daemon.namedGone); nil: never known to be.
	namedGone func(data []byte) string

	mu       sync.Mutex
	lastHash [sha256.Size]byte // content last tried, applied or refused
	failed   bool              // the last attempt was refused
	// failedNamed is named's digest when the last refused attempt began.
	failedNamed [sha256.Size]byte
	waiting     bool // put off since the last attempt (logged once)
	missing     bool // found missing since it was last read (logged once)
	// waitingNamed: put off for a file it names since it was last
	// applied or refused (logged once).
	waitingNamed bool
	// goneNamed: put off for a file it names found missing since it was
	// last applied or refused (logged once, and once more for each new
	// content put off: goneHash).
	goneNamed bool
	goneHash  [sha256.Size]byte
	// owed: a reload of the file even if unchanged (again) was put off
	// while it was being written; the next attempt reads it whatever
	// its content.
	owed bool
}

// How an attempt reads the file.
type attemptKind int

const (
	// onChange: the watcher's. Content already tried is skipped; a
	// missing file is waited for.
	onChange attemptKind = iota
	// onRetry: the content is read and applied even if unchanged (the
	// files it names besides may have changed: descriptors, certificates,
	// the token); a missing file is waited for.
	onRetry
	// onSignal: SIGHUP's. The file is read as it is, even if unchanged,
	// even while it is being written; a missing file is refused. The
	// files it names are checked as for any reload: one being written
	// in place, or replaced or written to while read, puts the reload
	// off until its writer has closed it.
	onSignal
)

// newReloader returns a reloader whose last-tried content is the one whose
// SHA-256 is initial (the content the daemon started with), so the first
// event that changes nothing reloads nothing.
func newReloader(path string, initial [sha256.Size]byte, apply func([]byte, func() bool) error, log *slog.Logger, count func(bool), notify func(ReloadResult)) *reloader {
	return &reloader{path: path, apply: apply, log: log, count: count, notify: notify, lastHash: initial}
}

// reload rereads the file and applies it if its content changed since the
// last attempt, or always when force is set (SIGHUP: see onSignal).
func (r *reloader) reload(force bool) ReloadResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	if force {
		return r.try(onSignal)
	}
	return r.try(onChange)
}

// putOff reports a watcher-triggered reload put off while the file is
// being written in place (see configWatcher.writing).
func (r *reloader) putOff() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.putOffLocked()
}

func (r *reloader) putOffLocked() {
	if !r.waiting {
		r.log.Info("config file is being written in place: waiting for its writer to close it", "file", r.path)
		r.waiting = true
	}
	if r.notify != nil {
		r.notify(ReloadResult{Writing: true})
	}
}

// retryFailed tries the file again, unchanged or not, if the last attempt
// was refused and the files it reads besides the config (the Envoy
// descriptor files, the certificates, the token) have changed since: they
// may have been fixed. Not otherwise: the same refusal would be logged
// and counted again at every event in their directories. It reports
// whether it tried, or put the try off (see again). A reload owed (put
// off while a file was being written) is tried whatever the files hold.
func (r *reloader) retryFailed() bool { return r.retry(nil) }

// retry is retryFailed, where changed, unless nil, must also report true
// for a refused config to be tried again (the descriptors in force differ
// from what their files now load).
func (r *reloader) retry(changed func() bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.owed:
	case !r.failed:
		return false
	case changed != nil && !changed():
		return false
	case r.namedGone != nil && r.namedGone(nil) != "":
		return false // tried again when it is back: it changes the digest
	case r.named != nil && r.named() == r.failedNamed:
		r.log.Debug("config refused earlier, and the files it names are unchanged since: not tried again", "file", r.path)
		return false
	}
	r.againLocked()
	return true
}

// again reloads the file, unchanged or not, for a change to a file it
// names (the token). Not while it is being written in place: what it
// holds may be the first part of a config, valid and wrong. The reload is
// then owed: the watcher's, when the writer has closed it, reads it
// whatever its content. A missing file is waited for, as by the watcher,
// and the reload owed the same way.
func (r *reloader) again() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.againLocked()
}

func (r *reloader) againLocked() {
	if r.writing != nil && r.writing() {
		r.owed = true
		r.putOffLocked()
		return
	}
	if r.try(onRetry).Missing {
		r.owed = true // read when it is back, whatever it then holds
	}
}

// try makes an attempt, remembers whether it was refused, and reports it.
func (r *reloader) try(kind attemptKind) ReloadResult {
	r.waiting = false
	res := r.attempt(kind)
	if !res.Unchanged && !res.Missing && !res.Writing {
		r.failed = res.Err != nil
	}
	if r.notify != nil {
		r.notify(res)
	}
	return res
}

// attempt reads the file as kind says and applies its content, unless it
// is put off: being written or changing (Writing), missing or naming a
// file that is missing (Missing, waited for), unchanged (Unchanged, for
// onChange only). A reload put off is owed: the next attempt reads the file
// whatever it holds. r.mu is held.
func (r *reloader) attempt(kind attemptKind) ReloadResult {
	data, owed, res, ok := r.read(kind == onSignal)
	if !ok {
		return res
	}
	h := sha256.Sum256(data)
	if kind == onChange && !owed && h == r.lastHash {
		r.log.Debug("config file touched, content unchanged: not reloading", "file", r.path)
		return ReloadResult{Unchanged: true}
	}
	if kind != onSignal && r.namedMissing(data, h) {
		return ReloadResult{Missing: true}
	}
	r.goneNamed = false
	namedSig, wait := r.namedWaits()
	if wait {
		return ReloadResult{Writing: true}
	}
	return r.applyRead(data, h, namedSig)
}

// read reads the file for an attempt (force: SIGHUP's, read as it is,
// refused if missing) and returns its content, and whether a reload was
// owed, which it clears. When there is nothing to apply it returns false
// and the attempt's result: the file being written or changing, missing
// (waited for, told once), or unreadable (refused).
func (r *reloader) read(force bool) (data []byte, owed bool, res ReloadResult, ok bool) {
	data, waiting, err := r.readFile(force)
	if waiting {
		return nil, false, ReloadResult{Writing: true}, false
	}
	if err != nil && !force && missing(r.path) {
		// Deleted before it is written again, or a ..data swap to a
		// version without it: the watcher reports its return (an event
		// in the directory, or its 2 s look), so wait for that, as long
		// as it takes, saying so once; the running config stays.
		if !r.missing {
			r.log.Warn("config file is missing: the running config stays; it is reloaded when the file is back", "file", r.path)
			r.missing = true
		}
		return nil, false, ReloadResult{Missing: true}, false
	}
	if err != nil && !force {
		// Missing when opened, back when looked at: read it as it is now.
		data, err = config.ReadFile(r.path)
	}
	if err == nil && !force && r.missing && len(data) == 0 {
		// Made again by a writer yet to write (rm f; gen > f): an
		// empty config is no one's, and the writes to come are seen
		// as any in place. Still waiting, nothing more to say.
		return nil, false, ReloadResult{Missing: true}, false
	}
	r.missing = false
	owed = r.owed
	r.owed = false
	if err != nil {
		err = fmt.Errorf("daemon: reload %s: %w", r.path, err)
		r.refused(err)
		return nil, owed, ReloadResult{Err: err}, false
	}
	return data, owed, ReloadResult{}, true
}

// readFile reads the file, checked (see readChecked) unless force
// (SIGHUP's: read as it is). It reports waiting, the reload owed and said
// so, when the file is being written or keeps changing while it is read;
// else err is what reading it said.
func (r *reloader) readFile(force bool) (data []byte, waiting bool, err error) {
	var (
		// What checks the read (readChecked): nothing for SIGHUP's.
		look    func() string
		writing func() bool
		same    func(string) bool
	)
	if !force {
		look, same = r.look, r.still
		if r.writing != nil {
			writing = func() bool { return !missing(r.path) && r.writing() }
		}
	}
	switch readChecked(r.path, look, writing, same, func() error { data, err = config.ReadFile(r.path); return err }) {
	case readWriting:
		// Back since the watcher found it missing, and so not being
		// written: its creator may be at work still, its first part
		// written (a config valid and wrong). Owed, read when it has
		// closed it (its watcher tries again then).
		r.log.Info("config file is being written in place: waiting for its writer to close it", "file", r.path)
		r.owed = true
		return nil, true, nil
	case readChanging:
		// Replaced or written to after each check (removed and
		// created again, its creator at work): what was read may be
		// its first part.
		r.log.Info("config file keeps changing while it is read: waiting for the next change", "file", r.path)
		r.owed = true
		return nil, true, nil
	}
	return data, false, err
}

// namedMissing reports whether a certificate, the token or a descriptor
// file that the config in data (of SHA-256 h) names is missing: the reload
// is then owed, and told once, and once more for each new content put off.
func (r *reloader) namedMissing(data []byte, h [sha256.Size]byte) bool {
	if r.namedGone == nil {
		return false
	}
	p := r.namedGone(data)
	if p == "" {
		return false
	}
	// Deleted before it is written again, a Secret's ..data swap to a
	// version without it: waited for as the config file is. Owed, the
	// reload is made when it is back (its watcher tries it again). A
	// config edited meanwhile waits too, if it still names the file, and
	// is said to: waited for in silence, the edit would seem lost.
	switch {
	case !r.goneNamed:
		r.log.Warn("a file the config names is missing: the running config stays; it is reloaded when the file is back", "file", r.path, "missing", p)
	case h != r.goneHash:
		r.log.Warn("config changed while a file it names is missing: the change is applied when the file is back", "file", r.path, "missing", p)
	}
	r.goneNamed, r.goneHash = true, h
	r.owed = true
	return true
}

// namedWaits looks at the files the config names and returns their
// signature, for apply to check them against (see applyRead). It reports
// wait, the reload owed and told once, when one of them is being written in
// place: it may hold the first part of what is written (the first limits
// of a domain, part of a CA bundle), and the reload is made when its writer
// has closed it (its watcher tries again).
//
// The files the config names are checked for every reload, SIGHUP's too:
// SIGHUP reads the config file as it is, but a CA bundle or a descriptor
// file read half written would be put in force as if whole.
func (r *reloader) namedWaits() (sig string, wait bool) {
	if r.namedLook != nil {
		sig = r.namedLook()
	}
	if r.namedWriting != nil && r.namedWriting() {
		if !r.waitingNamed {
			r.log.Info("a file the config names is being written in place: the reload waits for its writer to close it", "file", r.path)
			r.waitingNamed = true
		}
		r.owed = true
		return "", true
	}
	r.waitingNamed = false
	return sig, false
}

// applyRead applies data, of SHA-256 h, now the content last tried, and
// logs and counts the outcome. apply checks that the files the config names
// are still as namedSig says: if one changed meanwhile the reload is owed
// (Writing). A refusal remembers the digest of those files (failedNamed,
// see retry).
func (r *reloader) applyRead(data []byte, h [sha256.Size]byte, namedSig string) ReloadResult {
	r.lastHash = h
	var named [sha256.Size]byte
	if r.named != nil {
		// Before apply reads them: a change from now on is a change.
		named = r.named()
	}
	var still func() bool
	if r.namedStill != nil {
		still = func() bool { return r.namedStill(namedSig) }
	}
	if err := r.apply(data, still); err != nil {
		if errors.Is(err, ErrShuttingDown) {
			r.log.Info("config not reloaded: shutting down", "file", r.path)
			return ReloadResult{Err: err}
		}
		if errors.Is(err, errNamedMoved) {
			// Replaced or written to since the check above (removed
			// and created again, its creator at work): what apply read
			// may be its first part. Owed, the reload is made at its
			// next change (its watcher tries it again).
			r.log.Info("a file the config names changed while the reload read it: the reload waits for its next change", "file", r.path)
			r.owed = true
			return ReloadResult{Writing: true}
		}
		r.refused(err)
		r.failedNamed = named
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
