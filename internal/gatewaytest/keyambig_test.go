package gatewaytest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A request whose key part the app may read as another value than Sluice
// would count (a header or query parameter sent twice) never reaches the
// app through a gateway: Sluice answers forward auth 400 ambiguous_key,
// which Caddy passes on, and which nginx's auth_request turns into a 500
// that the example's error page answers 400 bad_request, in the
// fail-open variant too.
func TestGatewayAmbiguousKeyRefused(t *testing.T) {
	const rules = "  - name: per-key\n    key: [\"query:api_key\"]\n    rate: 100/s\n" +
		"  - name: per-header\n    key: [\"header:X-Api-Key\"]\n    rate: 100/s\n"
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
				two, _ := http.NewRequest("GET", g.url+"/items", nil)
				two.Header["X-Api-Key"] = []string{"random", "victim"}
				for _, tc := range []struct {
					what string
					r    result
				}{
					{"GET /items?api_key=random&api_key=victim", send(t, c, "GET", g.url+"/items?api_key=random&api_key=victim", nil)},
					{"GET /items with X-Api-Key twice", send(t, c, "GET", "", nil, two)},
				} {
					want := `"error":"ambiguous_key"` // Sluice's answer
					if k.name == "nginx" {
						want = `"error":"bad_request"` // auth_request keeps no body
					}
					if tc.r.status != http.StatusBadRequest || !strings.Contains(tc.r.body, want) {
						t.Errorf("%s: got %v, want it refused with 400 and %s", tc.what, tc.r, want)
					}
				}
				if got := a.hits.Load(); got != 0 {
					t.Errorf("the app saw %d ambiguous requests, want none", got)
				}
				if r := send(t, c, "GET", g.url+"/items?api_key=victim", map[string]string{"X-Api-Key": "victim"}); r.status != http.StatusOK || r.body != "app\n" {
					t.Errorf("GET /items with one key of each: got %v, want 200 from the app", r)
				}
			})
		}
	}
}
