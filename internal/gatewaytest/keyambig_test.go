package gatewaytest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A key part sent twice with different values through a gateway (a query
// parameter, a header) is counted under each value, so a client cannot
// add a fresh value beside another client's (which the app may read) and
// escape: once "victim" is spent, a request carrying it beside "random"
// is refused 429, in the fail-open variant too, and never reaches the
// app. A spelling of the name that frameworks read as it (PHP's api.key)
// is still refused: Sluice answers forward auth 400 ambiguous_key, which
// Caddy passes on and nginx's auth_request turns into a 500 that the
// example's error page answers 400 bad_request.
func TestGatewayRepeatedKeyCountsEach(t *testing.T) {
	const rules = "  - name: per-key\n    key: [\"query:api_key\"]\n    rate: 2/h\n" +
		"  - name: per-header\n    key: [\"header:X-Api-Key\"]\n    rate: 2/h\n"
	for _, k := range kinds {
		for _, open := range []bool{false, true} {
			if open && !k.canFailOpen {
				continue
			}
			t.Run(fmt.Sprintf("%s/failOpen=%v", k.name, open), func(t *testing.T) {
				a := startApp(t)
				y := sluiceYAML(t, k.sluice, "")
				if !strings.HasSuffix(y, "\n") {
					y += "\n"
				}
				s := startSluice(t, y+rules)
				g := k.start(t, s.addr, a.addr(), variant{failOpen: open})
				c := client("127.0.0.70")
				for i := range 2 { // spend "victim" under both rules
					if r := send(t, c, "GET", g.url+"/items?api_key=victim", map[string]string{"X-Api-Key": "victim"}); r.status != http.StatusOK || r.body != "app\n" {
						t.Fatalf("request %d with one key of each: got %v, want 200 from the app", i+1, r)
					}
				}
				hits := a.hits.Load()
				two, _ := http.NewRequest("GET", g.url+"/items", nil)
				two.Header["X-Api-Key"] = []string{"random", "victim"}
				for _, tc := range []struct {
					what string
					r    result
				}{
					{"GET /items?api_key=random&api_key=victim", send(t, c, "GET", g.url+"/items?api_key=random&api_key=victim", nil)},
					{"GET /items with X-Api-Key: random and X-Api-Key: victim", send(t, c, "GET", "", nil, two)},
				} {
					if tc.r.status != http.StatusTooManyRequests {
						t.Errorf("%s, victim spent: got %v, want 429", tc.what, tc.r)
					}
				}
				want := `"error":"ambiguous_key"` // Sluice's answer
				if k.name == "nginx" {
					want = `"error":"bad_request"` // auth_request keeps no body
				}
				if r := send(t, c, "GET", g.url+"/items?api.key=other", nil); r.status != http.StatusBadRequest || !strings.Contains(r.body, want) {
					t.Errorf("GET /items?api.key=other: got %v, want it refused with 400 and %s", r, want)
				}
				if got := a.hits.Load() - hits; got != 0 {
					t.Errorf("the app saw %d of the refused requests, want none", got)
				}
				// Two fresh values pass, each charged: a second request
				// under either is the key's last (another client: the
				// example's per-client rule has counted this one's).
				c = client("127.0.0.71")
				if r := send(t, c, "GET", g.url+"/items?api_key=f1&api_key=f2", nil); r.status != http.StatusOK {
					t.Errorf("GET /items?api_key=f1&api_key=f2: got %v, want 200", r)
				}
				if r := send(t, c, "GET", g.url+"/items?api_key=f2", nil); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "0" {
					t.Errorf("GET /items?api_key=f2 after f1&f2: got %v, want 200 with X-RateLimit-Remaining 0", r)
				}
			})
		}
	}
}
