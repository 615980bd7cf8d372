package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServerEndsWithTestProcess: a test binary that dies without its
// cleanups (a panic, a race report, go test's timeout) takes its
// redis-servers with it, rather than leaving them running for ever. A
// copy of this test binary starts a server, tells its PID and exits at
// once; the server must be gone soon after.
func TestServerEndsWithTestProcess(t *testing.T) {
	if os.Getenv("REDISTEST_ORPHAN") == "1" {
		s := StartServer(t)
		fmt.Printf("pid %d\n", s.PID())
		os.Exit(3) // no cleanup runs, as after a panic
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerEndsWithTestProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDISTEST_ORPHAN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "pid %d", &pid); err == nil {
			break
		}
	}
	cmd.Wait()
	if pid == 0 {
		t.Fatal("the child test told no redis-server PID")
	}
	t.Logf("redis-server %d, its test process gone", pid)
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) // ours: started by the child above
			t.Fatalf("redis-server %d still runs 30 s after its test process exited", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}
