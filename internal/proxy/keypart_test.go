package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// TestMissingKeyPartNotCounted: a request without the header a rule's key
// is made of is not counted by that rule: it passes with no rate-limit
// headers of that rule, and takes nothing from any key.
func TestMissingKeyPartNotCounted(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "per-key", Key: []string{"header:X-Key"}, Rate: "2/m", Algorithm: "fixed_window"},
	}})
	for i := range 3 {
		resp, body := get(t, f.proxy.URL+"/x", nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "999" || resp.Header.Get("RateLimit") != "" {
			t.Errorf("request %d without X-Key: %d %q, headers %v; want 200 with only the upstream's headers", i, resp.StatusCode, body, resp.Header)
		}
	}
	for _, res := range []string{"allowed", "denied"} {
		if got := counter(t, f.reg, "sluice_decisions_total", map[string]string{"rule": "per-key", "result": res}); got > 0 {
			t.Errorf("sluice_decisions_total{rule=per-key,result=%s} = %v after requests without the key part, want 0", res, got)
		}
	}
	for i, want := range []int{200, 200, 429} {
		resp, _ := get(t, f.proxy.URL+"/x", map[string]string{"X-Key": "a"})
		if resp.StatusCode != want || resp.Header.Get("X-RateLimit-Limit") != "2" {
			t.Errorf("request %d with X-Key: a: %d limit %q, want %d, limit 2", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), want)
		}
	}
}

// TestRuleWithoutMatch: a rule without match applies to every request,
// whatever its method and path.
func TestRuleWithoutMatch(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "everything", Rate: "3/m", Algorithm: "fixed_window"},
	}})
	req, err := http.NewRequest("POST", f.proxy.URL+"/b/c?q=1", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("POST /b/c: %d remaining %q, want 200, 2 left", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	for i, c := range []struct {
		path string
		want int
	}{{"/", 200}, {"/a/very/deep/path", 200}, {"/zzz", 429}} {
		resp, _ := get(t, f.proxy.URL+c.path, nil)
		if resp.StatusCode != c.want || resp.Header.Get("X-RateLimit-Limit") != "3" {
			t.Errorf("request %d, GET %s: %d limit %q, want %d, limit 3", i, c.path, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), c.want)
		}
	}
}
