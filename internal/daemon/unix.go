package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// socketMode is the mode of the daemon's Unix sockets: the daemon's user
// and group may connect (connecting takes write permission), no one else.
const socketMode = 0o660

// unixHook, set by tests, is called by listenUnix at its stages: "stale"
// once a socket found at the path refused a connection, before it is
// taken away; "made" once the private directory is made and locked,
// empty; "bound" once the new socket is bound and before it is final at
// its path.
var unixHook func(stage string)

// listenOn binds addr: host:port on TCP, or unix:/PATH, a Unix socket
// (listenUnix).
func listenOn(addr string) (net.Listener, error) {
	if path, ok := config.UnixPath(addr); ok {
		return listenUnix(path)
	}
	return net.Listen("tcp", addr)
}

// listenUnix binds a Unix socket at path with mode socketMode, whatever
// the umask, and never with another mode at path: the socket is bound in
// a new private directory (mode 0700) beside path, given its mode there,
// and only then linked to path. link(2) never replaces a file, so of two
// daemons started at once on one path the second is refused.
//
// A socket already at path that refuses connections is one a daemon
// killed before it could remove it: it is taken away, by a rename into
// the private directory, and removed. One that takes them belongs to
// another process: an error (EADDRINUSE, as for a TCP port in use).
// Anything else at path is never removed: an error. Closing the listener
// removes path while it is still the socket (unixListener).
//
// The private directory is named .sluice-PID-* and flocked while in use:
// one that a daemon killed mid-bind left beside path is removed by the
// next bind there (removeLeftovers), one a live daemon binds in never.
func listenUnix(path string) (net.Listener, error) {
	stale, err := checkSocketPath(path)
	if err != nil {
		return nil, err
	}
	removeLeftovers(filepath.Dir(path))
	dir, err := os.MkdirTemp(filepath.Dir(path), bindDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("make a private directory beside %s to bind its socket in: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("open the private directory %s: %w", dir, err)
	}
	defer d.Close() // after the removal: it unlocks
	defer os.RemoveAll(dir)
	lockBindDir(d)
	if unixHook != nil {
		unixHook("made")
	}
	if stale != nil {
		if err := takeStale(path, filepath.Join(dir, "stale"), stale); err != nil {
			return nil, err
		}
	}
	tmp := filepath.Join(dir, "s")
	ln, err := bindIn(d, tmp, path)
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // it would unlink tmp, not path
	if err := os.Chmod(tmp, socketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod the socket for %s: %w", path, err)
	}
	if unixHook != nil {
		unixHook("bound")
	}
	fi, err := os.Lstat(tmp)
	if err == nil {
		err = os.Link(tmp, path)
	}
	if err != nil {
		ln.Close()
		if errors.Is(err, fs.ErrExist) {
			// Another process made path since the check: most likely
			// another daemon started at the same moment.
			if _, err := checkSocketPath(path); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("another process made %s while this one was binding it: %w", path, syscall.EADDRINUSE)
		}
		return nil, fmt.Errorf("link the socket to %s: %w", path, err)
	}
	return &unixListener{UnixListener: ln, path: path, fi: fi}, nil
}

// checkSocketPath checks what is at path before a socket is bound there:
// nothing (nil, nil), a stale socket (its FileInfo), or an error for a
// live socket (EADDRINUSE) or anything else.
func checkSocketPath(path string) (fs.FileInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return nil, errors.New(config.NotSocket(path, fi.Mode()))
	}
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	switch {
	case err == nil:
		c.Close()
		return nil, fmt.Errorf("another process listens on %s (is another sluice running?): %w", path, syscall.EADDRINUSE)
	case errors.Is(err, syscall.ECONNREFUSED):
		// Stale: left by a process that was killed.
		if unixHook != nil {
			unixHook("stale")
		}
		return fi, nil
	}
	return nil, fmt.Errorf("%s is a socket that neither refuses nor takes a connection (%v); it is left alone", path, err)
}

// takeStale takes the stale socket stale away from path, renaming it to
// to (in the private directory, removed with it). A rename takes whatever
// is at path at that moment: when that is not stale, another daemon
// starting at the same moment replaced it first, and it is put back (path
// was without it for the few system calls between) and the start refused.
func takeStale(path, to string, stale fs.FileInfo) error {
	if err := os.Rename(path, to); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // another start removed it
		}
		return fmt.Errorf("remove the stale socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(to); err == nil && os.SameFile(fi, stale) {
		return nil
	}
	if err := os.Link(to, path); err != nil {
		return fmt.Errorf("another process replaced the stale socket %s while this one was removing it, and it could not be put back: %w", path, err)
	}
	if _, err := checkSocketPath(path); err != nil {
		return err
	}
	return fmt.Errorf("another process replaced the stale socket %s while this one was removing it: %w", path, syscall.EADDRINUSE)
}

// bindDirPrefix begins the names of listenUnix's private directories,
// .sluice-PID-RANDOM.
const bindDirPrefix = ".sluice-"

// bindDirPID returns the PID in name, the name of a private directory of
// listenUnix's, or false if name is not one.
func bindDirPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, bindDirPrefix)
	if !ok {
		return 0, false
	}
	pid, random, ok := strings.Cut(rest, "-")
	if !ok || !allDigits(pid) || !allDigits(random) {
		return 0, false
	}
	n, err := strconv.Atoi(pid)
	return n, err == nil && n > 0
}

// allDigits reports whether s is decimal digits, at least one.
func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// bindIn binds a Unix socket at tmp, a path in the directory of d, for
// the socket path. A tmp too long for a socket's address (path near
// config.MaxUnixPath, the private directory's name longer than path's
// base name) is bound through /proc/self/fd on Linux, which holds any
// directory's path in under 30 bytes.
func bindIn(d *os.File, tmp, path string) (*net.UnixListener, error) {
	addr := tmp
	if len(tmp) > config.MaxUnixPath {
		if runtime.GOOS != "linux" {
			return nil, fmt.Errorf("the socket path %s is too long to be bound in a private directory beside it (%s, %d bytes, over the %d a socket's address holds here): pick a path at most %d bytes long",
				path, tmp, len(tmp), config.MaxUnixPath, len(path)-(len(tmp)-config.MaxUnixPath))
		}
		addr = "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/s"
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("bind the socket for %s: %w", path, err)
	}
	return ln, nil
}

// unixListener is a Unix-socket listener bound under another name and
// linked to path: its Addr is path, and Close removes path while path is
// still its socket (not one another process has put there since).
type unixListener struct {
	*net.UnixListener
	path string
	fi   fs.FileInfo // the socket's
	once sync.Once
}

// Addr returns the socket's path.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Close removes the socket's path, as net.UnixListener's own Close does,
// before closing it.
func (l *unixListener) Close() error {
	l.once.Do(func() {
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.fi) {
			os.Remove(l.path)
		}
	})
	return l.UnixListener.Close()
}

// addrOf is the address a listener's Addrs gives: host:port, or
// unix:/PATH for a Unix socket.
func addrOf(ln net.Listener) string {
	if a, ok := ln.Addr().(*net.UnixAddr); ok {
		return config.UnixScheme + a.Name
	}
	return ln.Addr().String()
}
