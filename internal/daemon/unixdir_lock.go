//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// lockBindDir takes an exclusive flock(2) on d, a private directory being
// bound in, for as long as d is open: removeLeftovers then leaves the
// directory alone whatever its name says. The lock goes with the process,
// a SIGKILL too. Not fatal: on a file system without locks the directory
// is only never taken for a dead one's.
func lockBindDir(d *os.File) {
	syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// removeLeftovers removes from parent the private directories that
// listenUnix made and a killed daemon left (killed between making one and
// removing it): named .sluice-PID-*, a directory with mode 0700 that this
// user owns, holding nothing but the sockets bind puts there ("s", and
// "stale", a stale socket taken away), its PID no live process's, and no
// process holding its flock (lockBindDir: a binder's PID may be of
// another PID namespace). Anything else is left, and so is whatever
// cannot be checked: errors here are never fatal.
func removeLeftovers(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if pid, ok := bindDirPID(e.Name()); ok && e.IsDir() && !alive(pid) {
			removeLeftover(filepath.Join(parent, e.Name()))
		}
	}
}

// alive reports whether a process with PID pid exists (or may: any
// answer but ESRCH). This process's is alive: its own directories are of
// binds under way.
func alive(pid int) bool {
	if pid <= 0 || pid == os.Getpid() {
		return true
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// removeLeftover removes dir, a leftover of a dead binder by its name,
// if it is one (see removeLeftovers).
func removeLeftover(dir string) {
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || !ownedByUs(fi) {
		return
	}
	if syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // a binder at work
	}
	// Held from here: no binder starts in it. Still at its name (its own
	// binder may have removed it before the lock came free)?
	if at, err := os.Lstat(dir); err != nil || !os.SameFile(fi, at) {
		return
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(dir, n))
		if (n != "s" && n != "stale") || err != nil || fi.Mode().Type() != fs.ModeSocket || !ownedByUs(fi) {
			return // not only what a bind puts there: not ours to remove
		}
	}
	for _, n := range names {
		os.Remove(filepath.Join(dir, n))
	}
	os.Remove(dir) // fails if anything came in since
}

// ownedByUs reports whether fi is of a file this process's user owns.
func ownedByUs(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
