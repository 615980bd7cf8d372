//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package daemon

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/socktest"
)

// binder is this test binary run as a process that binds a Unix socket
// and stops mid-bind (see childBind).
type binder struct {
	cmd  *exec.Cmd
	logs *redistest.SyncBuffer
}

// startBinder runs a binder on sock and returns it once it has reached
// stage, its private directory made beside sock.
func startBinder(t *testing.T, sock, stage string) *binder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_BIND="+sock, "SLUICE_TEST_BIND_STAGE="+stage)
	b := &binder{cmd: cmd, logs: new(redistest.SyncBuffer)}
	cmd.Stderr = b.logs
	if _, err := cmd.StdinPipe(); err != nil { // held open: the binder waits
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != stage {
		t.Fatalf("binder: %q, %v, want stage %q; logs:\n%s", line, err, stage, b.logs.String())
	}
	return b
}

// kill SIGKILLs the binder and reaps it: its PID is then no process's.
func (b *binder) kill() {
	b.cmd.Process.Kill()
	b.cmd.Wait()
}

// dirOf returns the path of the binder's private directory in dir, and
// what it holds; it fails unless there is exactly one.
func (b *binder) dirOf(t *testing.T, dir string) (string, []string) {
	t.Helper()
	prefix := bindDirPrefix + strconv.Itoa(b.cmd.Process.Pid) + "-"
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), prefix) {
			found = append(found, filepath.Join(dir, e.Name()))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s holds %d private directories of the binder, want 1: %v", dir, len(found), found)
	}
	names, err := os.ReadDir(found[0])
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, e := range names {
		held = append(held, e.Name())
	}
	return found[0], held
}

// staleSocket leaves a socket at path that nothing accepts on, as a
// daemon killed while it listened does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
}

// bindAndDial binds sock with listenUnix, and dials it. The caller
// closes the listener.
func bindAndDial(t *testing.T, sock string) net.Listener {
	t.Helper()
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatalf("bind %s: %v", sock, err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		ln.Close()
		t.Fatalf("dial %s: %v", sock, err)
	}
	c.Close()
	return ln
}

// A daemon SIGKILLed mid-bind leaves its private directory beside the
// socket's path: empty (killed once it was made), with the socket bound
// in it, or with the stale socket it took away from the path too. The
// next bind of the path removes it, and binds.
func TestUnixBindLeftoverRemoved(t *testing.T) {
	for _, tc := range []struct {
		stage string
		stale bool
		held  []string
	}{
		{"made", false, nil},
		{"bound", false, []string{"s"}},
		{"bound", true, []string{"s", "stale"}},
	} {
		t.Run(tc.stage+map[bool]string{true: "-stale"}[tc.stale], func(t *testing.T) {
			dir := socktest.Dir(t)
			sock := filepath.Join(dir, "api.sock")
			if tc.stale {
				staleSocket(t, sock)
			}
			b := startBinder(t, sock, tc.stage)
			left, held := b.dirOf(t, dir)
			b.kill()
			if !slices.Equal(held, tc.held) {
				t.Fatalf("the binder's directory holds %q, want %q", held, tc.held)
			}
			if _, err := os.Lstat(left); err != nil {
				t.Fatalf("the killed binder's directory: %v, want it left behind", err)
			}
			ln := bindAndDial(t, sock)
			onlyEntry(t, dir, "api.sock")
			ln.Close()
		})
	}
}

// The private directory of a binder that is alive, mid-bind, is never
// removed: a bind of the same path beside it succeeds and leaves it. Once
// the binder is killed, the next bind removes it.
func TestUnixBindLiveDirKept(t *testing.T) {
	for _, stage := range []string{"made", "bound"} {
		t.Run(stage, func(t *testing.T) {
			dir := socktest.Dir(t)
			sock := filepath.Join(dir, "api.sock")
			b := startBinder(t, sock, stage)
			live, before := b.dirOf(t, dir)
			bindAndDial(t, sock).Close()
			if _, after := b.dirOf(t, dir); !slices.Equal(before, after) {
				t.Errorf("the live binder's directory held %q, and %q after a bind beside it", before, after)
			}
			b.kill()
			ln := bindAndDial(t, sock)
			defer ln.Close()
			if !gone(live) {
				t.Errorf("%s is still there after its binder was killed and the path bound again", live)
			}
			onlyEntry(t, dir, "api.sock")
		})
	}
}

// deadPID returns the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// A directory named as a dead process's private directory is removed only
// when it is one in every other way: a directory with mode 0700 that
// holds nothing but a socket named "s" or "stale", and that no process
// holds locked (a binder whose PID is of another PID namespace, alive).
// Anything else is left alone.
func TestUnixBindLeftoverOnlyOurs(t *testing.T) {
	parent := socktest.Dir(t)
	pid := strconv.Itoa(deadPID(t))
	mkdir := func(name string, mode os.FileMode, files ...string) string {
		t.Helper()
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		for _, f := range files {
			if f == "s" || f == "stale" {
				staleSocket(t, filepath.Join(d, f))
			} else {
				mustWrite(t, filepath.Join(d, f), "x")
			}
		}
		return d
	}
	dead := mkdir(bindDirPrefix+pid+"-1", 0o700, "s", "stale")
	locked := mkdir(bindDirPrefix+pid+"-2", 0o700, "s")
	kept := []string{
		mkdir(bindDirPrefix+pid+"-3", 0o700, "s", "notes"),         // more than a bind puts there
		mkdir(bindDirPrefix+pid+"-4", 0o755, "s"),                  // not a private directory's mode
		mkdir(bindDirPrefix+pid+"-5", 0o700, "notes"),              // a regular file
		mkdir(bindDirPrefix+"99999999", 0o700, "s"),                // no PID in the name
		mkdir(bindDirPrefix+pid+"-x", 0o700),                       // not a name MkdirTemp makes
		mkdir(".other-"+pid+"-6", 0o700, "s"),                      // another prefix
		filepath.Join(parent, bindDirPrefix+pid+"-7"),              // a symlink to a leftover
		mkdir(bindDirPrefix+strconv.Itoa(os.Getpid())+"-8", 0o700), // this process's: a bind under way
	}
	if err := os.Symlink(mkdir("target", 0o700, "s"), kept[6]); err != nil {
		t.Fatal(err)
	}
	l, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	removeLeftovers(parent)
	if !gone(dead) {
		t.Errorf("%s, a dead binder's leftover, is still there", dead)
	}
	for _, d := range append(kept, locked, filepath.Join(parent, "target")) {
		if gone(d) {
			t.Errorf("%s was removed; it is not a dead binder's leftover", d)
		}
	}
	if gone(filepath.Join(locked, "s")) {
		t.Errorf("the socket in %s, locked by a live binder, was removed", locked)
	}

	l.Close() // its binder is gone: a leftover
	removeLeftovers(parent)
	if !gone(locked) {
		t.Errorf("%s, unlocked, is still there", locked)
	}
}
