package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/redistest"
)

// startChildDaemon runs this test binary as a daemon process on the config
// file path and returns it with its addresses.
func startChildDaemon(t *testing.T, path string) (*exec.Cmd, Addrs) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_DAEMON="+path)
	logs := new(redistest.SyncBuffer)
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("child daemon %d logs:\n%s", cmd.Process.Pid, logs.String())
		}
	})
	var a Addrs
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &a) != nil || a.Proxy == "" {
		t.Fatalf("child daemon: no addresses (%q, %v); logs:\n%s", line, err, logs.String())
	}
	return cmd, a
}

// Two daemon processes share a Redis. The first queues deferred requests
// and is SIGKILLed while replaying them; the second claims what the first
// held and delivers it: every deferred request reaches the upstream, each
// once by its Idempotency-Key (at most one, in flight at the kill, twice
// with the same key), and reads as delivered from the survivor.
func TestDeferSurvivesSIGKILL(t *testing.T) {
	rs := redistest.StartServer(t)
	var mu sync.Mutex
	arrivals := map[string]int{} // Idempotency-Key → arrivals
	replays := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			mu.Lock()
			arrivals[k]++
			replays++
			mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := proxyConfig(up.URL, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
defer:
  claim_idle: 2s   # the survivor takes the victim's requests over 2s after its death
rules:
  - name: jobs
    key: ["header:X-Tenant"]
    rate: 2/s
    algorithm: token_bucket
    action: defer
`, rs.Addr))
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	victim, va := startChildDaemon(t, path)
	var ids []string
	for i := range 12 {
		r := do(t, http.MethodPost, "http://"+va.Proxy+"/jobs", "job "+strconv.Itoa(i), "X-Tenant", "acme")
		if r.status == http.StatusAccepted {
			var a struct {
				ID string `json:"deferred_id"`
			}
			json.Unmarshal([]byte(r.body), &a)
			ids = append(ids, a.ID)
		} else if r.status != http.StatusOK {
			t.Fatalf("POST /jobs: %d %s", r.status, r.body)
		}
	}
	if len(ids) < 8 {
		t.Fatalf("%d requests deferred, want at least 8 of 12 at 2/s", len(ids))
	}
	// Let the victim deliver some, then kill it while it holds the rest.
	waitUntil(t, "the victim's first replays", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return replays >= 2
	})
	if err := victim.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	victim.Wait()
	mu.Lock()
	atKill := replays
	mu.Unlock()
	if atKill >= len(ids) {
		t.Fatalf("the victim delivered all %d before the kill; nothing left to claim", atKill)
	}
	_, sa := startChildDaemon(t, path)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		keys, _ := redistest.Do(rs.Addr, "KEYS", "*")
		t.Logf("redis keys: %s", keys)
		for _, q := range []string{"XPENDING", "XINFO"} {
			_ = q
		}
		p, err := redistest.Do(rs.Addr, "XINFO", "CONSUMERS", "sluice:defer:{"+deferqTag("jobs")+"}:q", "sluice")
		t.Logf("consumers: %s %v", p, err)
		for _, id := range ids {
			h, _ := redistest.Do(rs.Addr, "HGETALL", "sluice:defer:{"+deferqTag("jobs")+"}:s:"+id)
			t.Logf("%s: %s", id, h)
		}
	})
	waitUntil(t, "every deferred request delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(arrivals) == len(ids)
	})
	for _, id := range ids {
		waitUntil(t, id+" delivered", func() bool {
			r := get(t, "http://"+sa.API+"/v1/deferred/"+id)
			return r.status == http.StatusOK && json.Valid([]byte(r.body)) && strings.Contains(r.body, `"state":"delivered"`)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, id := range ids {
		switch arrivals[id] {
		case 1:
		case 2:
			twice++
		default:
			t.Errorf("%s reached the upstream %d times", id, arrivals[id])
		}
	}
	if twice > 1 || replays != len(ids)+twice {
		t.Errorf("%d replays of %d ids, %d twice; want each once, at most the one in flight at the kill twice", replays, len(ids), twice)
	}
	t.Logf("%d deferred; %d delivered by the victim before SIGKILL, the rest by the survivor; %d sent twice", len(ids), atKill, twice)
}

// waitUntil polls cond until it holds; a minute is the contract's bound
// for a claim, so the wait is bounded a little past it.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func deferqTag(rule string) string { return deferq.Tag(rule) }
