package gatewaytest

import (
	"net/http"
	"strings"
	"testing"
)

// A request no rule applies to gets no rate-limit headers at all (not
// empty ones); one a rule applies to gets them all.
func TestGatewayHeadersOnlyWhereARuleApplies(t *testing.T) {
	names := []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Retry-After", "Retry-After"}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			// Only the login rule.
			y := replace(t, sluiceYAML(t, k.sluice, ""), "  - name: per-client\n    key: [ip]\n    rate: 3/h\n", "  - name: unused\n    match: {path: /unused}\n    key: [ip]\n    rate: 3/h\n")
			s := startSluice(t, y)
			g := k.start(t, s.addr, a.addr(), variant{})
			c := client("127.0.0.60")
			r := send(t, c, "GET", g.url+"/items", nil)
			if r.status != http.StatusOK || r.body != "app\n" {
				t.Fatalf("GET /items: got %v, want 200 from the app", r)
			}
			for _, name := range names {
				if v, ok := r.header[name]; ok {
					t.Errorf("GET /items, which no rule limits: %s: %q, want no such header", name, v)
				}
			}
			r = send(t, c, "POST", g.url+"/login", nil)
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("RateLimit"), `"login";r=0;`) {
				t.Fatalf("POST /login: got %v, want 200 with login's headers", r)
			}
			for _, name := range names[:5] {
				if r.header.Get(name) == "" {
					t.Errorf("POST /login: no %s (%v)", name, r)
				}
			}
		})
	}
}
