package daemon

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestReloadRemovedReaddedRenamed: a rule removed by a reload and added
// back (same name, same limit) before its counters expire finds them where
// it left them; a rule renamed starts fresh, the name being part of its
// counters.
func TestReloadRemovedReaddedRenamed(t *testing.T) {
	const keep = "listen: 127.0.0.1:0\nrules:\n  - {name: keep, rate: 3/h}\n"
	td := startDaemon(t, keep+"  - {name: gone, rate: 3/h}\n")
	for range 2 {
		if a, _ := check(t, td.api, "gone", "k", 1); !a.Allowed {
			t.Fatalf("gone: %+v, want allowed", a)
		}
	}
	reload := func(step, content string) {
		t.Helper()
		mustWrite(t, td.path, content)
		if err := td.d.Reload(); err != nil {
			t.Fatalf("%s: Reload: %v", step, err)
		}
	}
	reload("removed", keep)
	if _, status := check(t, td.api, "gone", "k", 1); status != 400 {
		t.Errorf("gone after its removal: status %d, want 400 (no such rule)", status)
	}
	reload("added back", keep+"  - {name: gone, rate: 3/h}\n")
	if a, _ := check(t, td.api, "gone", "k", 1); !a.Allowed || a.Remaining != 0 {
		t.Errorf("gone added back: %+v, want allowed with remaining 0 (its two hits kept)", a)
	}
	reload("renamed", keep+"  - {name: renamed, rate: 3/h}\n")
	if a, _ := check(t, td.api, "renamed", "k", 1); !a.Allowed || a.Remaining != 2 {
		t.Errorf("gone renamed to renamed: %+v, want allowed with remaining 2 (fresh counters)", a)
	}
	if body := rulesInForce(t, td); strings.Contains(body, `"gone"`) {
		t.Errorf("GET /v1/rules after the rename: %s", body)
	}
}

// TestReloadUnderTraffic: reloads while decisions are being made on a rule
// they leave unchanged (other rules and client_ip change around it) lose
// none of its counts and add none: across 30 reloads, exactly its limit
// of requests is admitted.
func TestReloadUnderTraffic(t *testing.T) {
	const base = "listen: 127.0.0.1:0\nrules:\n  - {name: keep, rate: 300/h, algorithm: token_bucket}\n"
	td := startDaemon(t, base)
	var allowed, denied atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a, status := check(t, td.api, "keep", "k", 1)
				switch {
				case status != http.StatusOK:
					t.Errorf("POST /v1/check during reloads: status %d", status)
					return
				case a.Allowed:
					allowed.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	for i := range 30 {
		extra := ""
		if i%2 == 0 {
			extra = "  - {name: other, rate: 5/s}\n"
		}
		if i%3 == 0 {
			extra += "client_ip: {ipv6_prefix: 48}\n"
		}
		mustWrite(t, td.path, base+extra)
		if err := td.d.Reload(); err != nil {
			t.Errorf("reload %d: %v", i, err)
		}
	}
	// Every request after the limit is spent is denied: wait until some
	// are, so that the count of those admitted is final.
	for denied.Load() < 20 && !t.Failed() {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	if got := allowed.Load(); got != 300 {
		t.Errorf("admitted %d requests of keep (300/h) across 30 reloads, want 300", got)
	}
}

// TestReloadActionKeepsCounters: as docs/config.md says, a rule whose
// limit is unchanged keeps its counters when its action changes (reject
// to shadow), but one without algorithm: starts fresh when its action
// changes to delay, whose default algorithm is another (leaky_bucket).
func TestReloadActionKeepsCounters(t *testing.T) {
	const rule = "listen: 127.0.0.1:0\nrules:\n  - {name: r, rate: 3/h%s}\n"
	td := startDaemon(t, fmt.Sprintf(rule, ""))
	for i, tc := range []struct {
		action string
		kept   bool
	}{
		{", action: shadow", true},
		{", action: delay", false},
	} {
		used := fmt.Sprintf("used-%d", i)
		check(t, td.api, "r", used, 2)
		if err := os.WriteFile(td.path, []byte(fmt.Sprintf(rule, tc.action)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := td.d.Reload(); err != nil {
			t.Fatal(err)
		}
		a, _ := check(t, td.api, "r", used, 1)
		fresh, _ := check(t, td.api, "r", fmt.Sprintf("fresh-%d", i), 1)
		if kept := a.Remaining < fresh.Remaining; kept != tc.kept {
			t.Errorf("after the reload to%s: a key used before has %d remaining, a fresh one %d; want kept=%v", tc.action, a.Remaining, fresh.Remaining, tc.kept)
		}
	}
}
