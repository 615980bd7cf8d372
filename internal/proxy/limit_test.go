package proxy_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/rules"
)

func TestRejectAndHeaders(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "per-ip", Match: rules.MatchSpec{Path: "/api/*"}, Rate: "3/m", Algorithm: "fixed_window"},
	}})
	for i, want := range []int{200, 200, 200, 429, 429} {
		resp, body := get(t, f.proxy.URL+"/api/x", nil)
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %q, want %d", i, resp.StatusCode, body, want)
		}
		if got := resp.Header.Values("X-RateLimit-Limit"); len(got) != 1 || got[0] != "3" {
			t.Errorf("request %d: X-RateLimit-Limit %q, want exactly [3] (the upstream's replaced)", i, got)
		}
		if wantRem := fmt.Sprint(max(2-i, 0)); resp.Header.Get("X-RateLimit-Remaining") != wantRem {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %s", i, resp.Header.Get("X-RateLimit-Remaining"), wantRem)
		}
		if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") != `"per-ip";q=3;w=60` {
			t.Errorf("request %d: RateLimit %q RateLimit-Policy %q", i, resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"))
		}
		if want == 429 {
			if !strings.HasPrefix(body, `{"error":"rate_limited","rule":"per-ip","retry_after_ms":`) || resp.Header.Get("Retry-After") == "" {
				t.Errorf("request %d: 429 body %q Retry-After %q", i, body, resp.Header.Get("Retry-After"))
			}
			if got := resp.Header.Values("X-RateLimit-Retry-After"); len(got) != 1 || got[0] != resp.Header.Get("Retry-After") {
				t.Errorf("request %d: X-RateLimit-Retry-After %q, want exactly Retry-After's %q", i, got, resp.Header.Get("Retry-After"))
			}
		} else if got := resp.Header.Get("X-RateLimit-Retry-After"); got != "" {
			t.Errorf("request %d: allowed answer with X-RateLimit-Retry-After %q", i, got)
		}
	}
	if got := f.up.hits.Load(); got != 3 {
		t.Errorf("upstream hits = %d, want 3: limited requests must never reach it", got)
	}
	// No rule applies outside /api/: no headers but the upstream's.
	if resp, _ := get(t, f.proxy.URL+"/other", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "999" || resp.Header.Get("RateLimit") != "" {
		t.Errorf("GET /other: %d headers %v, want 200 with only the upstream's headers", resp.StatusCode, resp.Header)
	}
}

// Denied by one rule consumes nothing from the others; headers carry the
// tightest rule.
func TestSeveralRules(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "all", Match: rules.MatchSpec{Path: "/api/*"}, Rate: "10/m"},
		{Name: "expensive", Match: rules.MatchSpec{Path: "/api/expensive"}, Rate: "1/m"},
	}})
	resp, _ := get(t, f.proxy.URL+"/api/expensive", nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "1" || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("first /api/expensive: %d limit %q remaining %q, want 200 with the tightest rule (expensive: 1, 0 left)",
			resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"))
	}
	resp, body := get(t, f.proxy.URL+"/api/expensive", nil)
	if resp.StatusCode != 429 || !strings.Contains(body, `"rule":"expensive"`) {
		t.Errorf("second /api/expensive: %d %q, want 429 by expensive", resp.StatusCode, body)
	}
	resp, _ = get(t, f.proxy.URL+"/api/cheap", nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "8" {
		t.Errorf("/api/cheap after a denied request: %d remaining %q, want 200 with 8 left (the denied request consumed nothing from all)",
			resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	if f.up.hits.Load() != 2 {
		t.Errorf("upstream hits = %d, want 2", f.up.hits.Load())
	}
}

func TestShadowForwardsAndCounts(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "watch", Rate: "1/m", Action: "shadow"},
	}})
	for i := range 3 {
		if resp, _ := get(t, f.proxy.URL+"/x", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "999" {
			t.Errorf("request %d under a shadow rule: %d limit %q, want 200 with no proxy headers", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
		}
	}
	if f.up.hits.Load() != 3 {
		t.Errorf("upstream hits = %d, want 3", f.up.hits.Load())
	}
	if got := counter(t, f.reg, "sluice_decisions_total", map[string]string{"rule": "watch", "result": "shadow_denied"}); got != 2 {
		t.Errorf("shadow_denied for watch = %v, want 2", got)
	}
}

func counter(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// TestPathSpellings: once /login is spent, no other spelling of it reaches
// the upstream; an allowed request reaches it with its path as sent.
func TestPathSpellings(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "login", Match: rules.MatchSpec{Path: "/login"}, Rate: "1/m", Algorithm: "fixed_window"},
		{Name: "admin", Match: rules.MatchSpec{Path: "/admin/*", CaseInsensitive: true}, Rate: "1/m", Algorithm: "fixed_window"},
	}})
	if resp, body := get(t, f.proxy.URL+"/login;v=1", nil); resp.StatusCode != 200 {
		t.Fatalf("GET /login;v=1: %d %q, want 200", resp.StatusCode, body)
	}
	f.up.mu.Lock()
	got := f.up.last.RequestURI
	f.up.mu.Unlock()
	if got != "/login;v=1" {
		t.Errorf("upstream saw %q, want the path as sent, /login;v=1", got)
	}
	for _, sp := range []string{"/login", "/login/", "/login;x", "/Login;x/../login", "/%6Cogin", "/login%2f", "/login%2F",
		"//login", "/./login", "/a/../login", "/a/..;/login", "/%252e%252e/login", "/%256Cogin", "/login%5C"} {
		if resp, body := get(t, f.proxy.URL+sp, nil); resp.StatusCode != 429 || !strings.Contains(body, `"rule":"login"`) {
			t.Errorf("GET %s after /login was spent: %d %q, want 429 from rule login", sp, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, f.proxy.URL+"/Admin/Users", nil); resp.StatusCode != 200 {
		t.Fatalf("GET /Admin/Users: %d, want 200", resp.StatusCode)
	}
	for _, sp := range []string{"/admin/users", "/ADMIN", "/admin;x/x", "/%41DMIN/x"} {
		if resp, _ := get(t, f.proxy.URL+sp, nil); resp.StatusCode != 429 {
			t.Errorf("GET %s after the case-insensitive /admin/* was spent: %d, want 429", sp, resp.StatusCode)
		}
	}
	if got := f.up.hits.Load(); got != 2 {
		t.Errorf("upstream hits = %d, want 2", got)
	}
}

// TestIPv6Prefix: through a trusted proxy, twenty addresses of one /64 share
// one per-ip counter; an address of the next /64 has its own; the upstream
// still sees each client's full address.
func TestIPv6Prefix(t *testing.T) {
	f := start(t, setup{
		specs:   []rules.Spec{{Name: "per-ip", Rate: "10/h", Algorithm: "fixed_window"}},
		trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	})
	passed := 0
	for i := range 20 {
		addr := fmt.Sprintf("2001:db8:5:6:%x::%x", i*977, i+1)
		resp, _ := get(t, f.proxy.URL+"/x", map[string]string{"X-Forwarded-For": addr})
		if resp.StatusCode == 200 {
			passed++
			f.up.mu.Lock()
			xff := f.up.last.Header.Get("X-Forwarded-For")
			f.up.mu.Unlock()
			if xff != netip.MustParseAddr(addr).String() {
				t.Errorf("upstream X-Forwarded-For %q, want the full address %s", xff, addr)
			}
		}
	}
	if passed != 10 {
		t.Errorf("20 addresses of one /64 against 10/h: %d passed, want 10", passed)
	}
	if resp, _ := get(t, f.proxy.URL+"/x", map[string]string{"X-Forwarded-For": "2001:db8:5:7::1"}); resp.StatusCode != 200 {
		t.Errorf("an address of the next /64: %d, want 200", resp.StatusCode)
	}
	// IPv4-mapped IPv6 counts as IPv4.
	for i, want := range []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429} {
		addr := "192.0.2.9"
		if i%2 == 1 {
			addr = "::ffff:192.0.2.9"
		}
		if resp, _ := get(t, f.proxy.URL+"/x", map[string]string{"X-Forwarded-For": addr}); resp.StatusCode != want {
			t.Fatalf("request %d from %s: %d, want %d", i, addr, resp.StatusCode, want)
		}
	}
}
