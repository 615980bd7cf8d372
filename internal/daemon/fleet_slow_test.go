package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// pause stops the redis-server with SIGSTOP (a hung Redis: connections
// open, no answer) until the returned function or the test's end resumes
// it.
func pause(t *testing.T, rs *redistest.Server) (resume func()) {
	t.Helper()
	pid := rs.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	stopped := true
	resume = func() {
		if stopped {
			stopped = false
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %d: %v", pid, err)
			}
		}
	}
	t.Cleanup(resume) // before the server's own cleanup stops it
	return resume
}

// TestSlowRedisOnError: a Redis that stops answering under a running
// daemon (SIGSTOP: the connections stay open, every call waits for the
// timeout) is a Redis that cannot decide: each on_error policy applies,
// /readyz fails and says which mode, and once Redis answers again the
// decisions go back to it, the calls that timed out included (they ran
// late: counted, as the README says).
func TestSlowRedisOnError(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	for _, c := range []struct {
		policy  string
		status  int
		allowed bool
		readyz  string
	}{
		{"allow", http.StatusOK, true, ""},
		{"deny", http.StatusServiceUnavailable, false, ""},
		{"local", http.StatusOK, true, "deciding locally at rate/2"},
	} {
		t.Run(c.policy, func(t *testing.T) {
			t.Parallel() // each waits out its calls' timeouts, on a Redis and a daemon of its own
			rs := redistest.StartServer(t)
			td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s} # no call may time out while Redis is up: the counts are exact
  on_error: %s
  expected_instances: 2
rules:
  - name: r
    rate: 100/h
    algorithm: fixed_window
`, rs.Addr, c.policy))
			if n := allowedOf(t, td.api, "r", "k", 2); n != 2 {
				t.Fatalf("Redis up: %d of 2 allowed", n)
			}
			resume := pause(t, rs)
			a, status := check(t, td.api, "r", "k", 1)
			if status != c.status || a.Allowed != c.allowed {
				t.Fatalf("on_error %s, Redis hung: %d %+v; want %d, allowed %v", c.policy, status, a, c.status, c.allowed)
			}
			if got := get(t, td.api+"/readyz"); got.status != http.StatusServiceUnavailable || !strings.Contains(got.body, c.readyz) {
				t.Errorf("GET /readyz, Redis hung: %d %q; want 503 saying %q", got.status, got.body, c.readyz)
			}
			wantLocal := 0.0
			if c.policy == "local" {
				wantLocal = 1
				// Decided in memory without waiting on Redis again: the
				// share of 100/2 is 50, the key's first local decision
				// was the one above.
				if n := allowedOf(t, td.api, "r", "k", 60); n != 49 {
					t.Errorf("local mode: %d of 60 more allowed, want 49 (the share 50, less the one above)", n)
				}
			}
			if v := td.metric("sluice_store_local"); v != wantLocal {
				t.Errorf("sluice_store_local = %v with Redis hung, want %v", v, wantLocal)
			}
			resume()
			waitFor(t, "/readyz to pass", func() bool { return get(t, td.api+"/readyz").status == http.StatusOK })
			waitFor(t, "decisions back on Redis", func() bool { return td.metric("sluice_store_local") == 0 })
			// On Redis: the 2 decided before, the call that timed out
			// (it ran once Redis woke up), and this one.
			a, status = check(t, td.api, "r", "k", 1)
			if status != http.StatusOK || !a.Allowed || a.Remaining != 96 {
				t.Errorf("back on Redis: %d %+v; want allowed, remaining 96 (the late call counted once)", status, a)
			}
		})
	}
}

// TestIdleRestartNoError: Redis restarts while the daemon is idle. The
// connections the daemon held are dead; once the daemon has seen the
// restart (its Redis watch, within a second), the next decision must not
// fail on one of them (with on_error: deny, a 503 for nothing).
func TestIdleRestartNoError(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	rs := redistest.StartServer(t)
	td := startDaemon(t, fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: deny
rules:
  - name: r
    rate: 100/h
    algorithm: fixed_window
`, rs.Addr))
	if n := allowedOf(t, td.api, "r", "k", 2); n != 2 {
		t.Fatalf("Redis up: %d of 2 allowed", n)
	}
	rs.Stop()
	rs.Restart()
	waitFor(t, "the daemon to see the restart", func() bool { return strings.Contains(td.logs.String(), "run_id changed") })
	for i := range 3 {
		if a, status := check(t, td.api, "r", "k", 1); status != http.StatusOK || !a.Allowed {
			t.Fatalf("check %d after the restart: %d %+v, want 200 and allowed", i, status, a)
		}
	}
}
