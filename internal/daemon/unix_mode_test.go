package daemon

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/socktest"
)

// setUnixHook sets unixHook for the test, and clears it after. The hook
// and the umask are the whole process's: t must not be parallel
// (t.Setenv refuses a parallel test).
func setUnixHook(t *testing.T, hook func(stage string)) {
	t.Setenv("SLUICE_TEST_PACKAGE_HOOKS", t.Name())
	unixHook = hook
	t.Cleanup(func() { unixHook = nil })
}

// Under umask 000 a socket is bound with mode 0777. At no moment may its
// path hold it with any mode but 0660: the hook runs between the bind and
// the moment the socket is final, and finds nothing at the path yet, or a
// socket with mode 0660.
func TestUnixSocketNeverWider(t *testing.T) {
	sock := filepath.Join(socktest.Dir(t), "api.sock")
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	called := 0
	setUnixHook(t, func(stage string) {
		if stage != "bound" {
			return
		}
		called++
		fi, err := os.Lstat(sock)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			t.Errorf("at bind: %v", err)
		case fi.Mode().Perm() != socketMode:
			t.Errorf("at bind, %s is there with mode %v, want nothing yet or mode %v", sock, fi.Mode().Perm(), fs.FileMode(socketMode))
		}
	})
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if called != 1 {
		t.Fatalf("the hook ran %d times, want once", called)
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != socketMode {
		t.Fatalf("the socket: %v, %v; want a socket with mode 0660", fi.Mode(), err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial the socket: %v", err)
	}
	c.Close()
}

// raceStart runs listenUnix(sock) as daemon A, and at A's stage a second
// start, B, on the same path, whole; it checks that exactly one of them
// listens, on sock, and that the other was refused with EADDRINUSE.
func raceStart(t *testing.T, sock, stage string) {
	t.Helper()
	var b net.Listener
	var bErr error
	inB := false
	setUnixHook(t, func(s string) {
		if s != stage || inB {
			return
		}
		inB = true
		b, bErr = listenUnix(sock)
	})
	a, aErr := listenUnix(sock)
	if !inB {
		t.Fatalf("stage %q never came", stage)
	}
	for _, ln := range []net.Listener{a, b} {
		if ln != nil {
			defer ln.Close()
		}
	}
	var winner net.Listener
	switch {
	case aErr == nil && bErr == nil:
		t.Fatalf("both starts listen on %s: the second replaced the first's live socket", sock)
	case aErr != nil && bErr != nil:
		t.Fatalf("neither start listens: %v; %v", aErr, bErr)
	case aErr == nil:
		winner = a
		if !errors.Is(bErr, syscall.EADDRINUSE) {
			t.Errorf("the second start: %v, want EADDRINUSE", bErr)
		}
	default:
		winner = b
		if !errors.Is(aErr, syscall.EADDRINUSE) {
			t.Errorf("the start that lost: %v, want EADDRINUSE", aErr)
		}
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	got, err := winner.Accept()
	if err != nil {
		t.Fatalf("the start that listens does not get the connection to %s: %v", sock, err)
	}
	got.Close()
	onlyEntry(t, filepath.Dir(sock), filepath.Base(sock))
}

// onlyEntry checks that dir holds name and nothing else: no private
// directory of a start is left behind.
func onlyEntry(t *testing.T, dir, name string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Name() != name {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %q, want only %s", dir, names, name)
	}
}

// Two daemons started at once on a free path: one listens, the other is
// refused (EADDRINUSE); neither takes the other's socket.
func TestUnixTwoStartsAtOnce(t *testing.T) {
	raceStart(t, filepath.Join(socktest.Dir(t), "api.sock"), "bound")
}

// Two daemons started at once on the path of a stale socket, the second
// replacing it while the first is between finding it stale and removing
// it: the first must not remove the second's live socket.
func TestUnixTwoStartsOnStaleSocket(t *testing.T) {
	sock := filepath.Join(socktest.Dir(t), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	raceStart(t, sock, "stale")
}

// A socket path of the longest length a socket's address holds, with a
// short base name: the private directory's path is longer than it, yet
// the socket is made, 0660, at the path, and removed on Close.
func TestUnixLongestPath(t *testing.T) {
	const base = "a.sock"
	dir := socktest.Dir(t)
	for len(dir)+1+len(base) < config.MaxUnixPath {
		n := min(20, config.MaxUnixPath-len(dir)-1-len(base)-1)
		if n <= 0 { // one byte short: lengthen the base name instead
			break
		}
		dir = filepath.Join(dir, strings.Repeat("d", n))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, base)
	sock += strings.Repeat("k", config.MaxUnixPath-len(sock))
	if len(sock) != config.MaxUnixPath {
		t.Fatalf("the test's path is %d bytes, want %d", len(sock), config.MaxUnixPath)
	}
	ln, err := listenUnix(sock)
	if runtime.GOOS != "linux" {
		if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "too long") {
			t.Errorf("listenUnix(%d bytes): %v, want an error naming the path as too long", len(sock), err)
		}
		return
	}
	if err != nil {
		t.Fatalf("listenUnix(%d bytes): %v", len(sock), err)
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != socketMode {
		t.Fatalf("the socket: %v, %v; want a socket with mode 0660", fi.Mode(), err)
	}
	if got := addrOf(ln); got != "unix:"+sock {
		t.Errorf("addrOf = %q, want unix:%s", got, sock)
	}
	onlyEntry(t, dir, filepath.Base(sock))
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	ln.Close()
	if !gone(sock) {
		t.Errorf("%s is still there after Close", sock)
	}
}

// Close removes the path only while it is still the listener's socket:
// one another process has put there since is left alone.
func TestUnixCloseLeavesAnothersSocket(t *testing.T) {
	sock := filepath.Join(socktest.Dir(t), "api.sock")
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ln.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the other socket at %s is gone after the first listener's Close: %v", sock, err)
	}
	c.Close()
}
