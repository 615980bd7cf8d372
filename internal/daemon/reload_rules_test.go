package daemon

import (
	"strings"
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
