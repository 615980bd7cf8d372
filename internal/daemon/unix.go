package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// socketMode is the mode of the daemon's Unix sockets: the daemon's user
// and group may connect (connecting takes write permission), no one else.
const socketMode = 0o660

// listenOn binds addr: host:port on TCP, or unix:/PATH, a Unix socket
// (listenUnix).
func listenOn(addr string) (net.Listener, error) {
	if path, ok := config.UnixPath(addr); ok {
		return listenUnix(path)
	}
	return net.Listen("tcp", addr)
}

// listenUnix binds a Unix socket at path with mode socketMode, set after
// binding so that the umask does not matter. A socket already at path
// that refuses connections is one a daemon killed before it could
// remove it: it is removed. One that takes them belongs to another
// process: an error (EADDRINUSE, as for a TCP port in use). Anything
// else at path is never removed: an error. Closing the listener removes
// the socket (net.UnixListener's own unlink on Close).
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s is not a socket (%s); it is left alone: remove it, or pick another path", path, kindOf(fi.Mode()))
		}
		c, err := net.DialTimeout("unix", path, 5*time.Second)
		switch {
		case err == nil:
			c.Close()
			return nil, fmt.Errorf("another process listens on %s (is another sluice running?): %w", path, syscall.EADDRINUSE)
		case errors.Is(err, syscall.ECONNREFUSED):
			// Stale: left by a process that was killed.
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("remove the stale socket %s: %w", path, err)
			}
		default:
			return nil, fmt.Errorf("%s is a socket that neither refuses nor takes a connection (%v); it is left alone", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, socketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// kindOf names the kind of file of mode m.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a " + m.Type().String() + " file"
}

// addrOf is the address a listener's Addrs gives: host:port, or
// unix:/PATH for a Unix socket.
func addrOf(ln net.Listener) string {
	if a, ok := ln.Addr().(*net.UnixAddr); ok {
		return config.UnixScheme + a.Name
	}
	return ln.Addr().String()
}
