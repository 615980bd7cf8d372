package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// A prefix rule applies to every request the upstream routes under its
// prefix. Servers that route on the path as sent, segment by segment —
// Go's ServeMux (1.22+) with %2E%2E or ..%2F, Node's http and Express with
// literal dot segments — serve /api/%2E%2E/a and /api/../a from their
// /api/ handler, while the canonical path (decoded, dot segments
// resolved) is /a: the rule must count them too.
func TestPrefixRuleCoversRawSegments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		router    func(api, other http.HandlerFunc) http.Handler
		spellings []string
	}{
		{"Go ServeMux", func(api, other http.HandlerFunc) http.Handler {
			m := http.NewServeMux()
			m.Handle("/api/", api)
			m.Handle("/", other)
			return m
		}, []string{"/api/%2E%2E/a", "/api/.%2E/a", "/api/..%2Fa", "/api/%2e%2e%2fa"}},
		{"raw path router (Node, Express)", func(api, other http.HandlerFunc) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.RequestURI, "/api/") {
					api(w, r)
					return
				}
				other(w, r)
			})
		}, []string{"/api/../a", "/api/./../a", "/api/x/../../a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var apiHits atomic.Int64
			up := httptest.NewServer(tc.router(func(w http.ResponseWriter, r *http.Request) {
				apiHits.Add(1)
				io.WriteString(w, "api")
			}, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "other") }))
			t.Cleanup(up.Close)
			f := start(t, setup{specs: []rules.Spec{
				{Name: "api", Match: rules.MatchSpec{Path: "/api/*"}, Rate: "1/m", Algorithm: "fixed_window"},
			}, up: &upstream{srv: up}})
			if resp, body := get(t, f.proxy.URL+"/api/a", nil); resp.StatusCode != 200 || body != "api" {
				t.Fatalf("GET /api/a: %d %q, want 200 from the api handler", resp.StatusCode, body)
			}
			for _, sp := range tc.spellings {
				if resp, body := get(t, f.proxy.URL+sp, nil); resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("GET %s after /api/a spent the limit: %d %q, want 429 (the upstream routes it to /api/)", sp, resp.StatusCode, body)
				}
			}
			if n := apiHits.Load(); n != 1 {
				t.Errorf("the upstream's /api/ handler served %d requests, want 1 (rate 1/m)", n)
			}
			// Paths the upstream serves elsewhere are not counted.
			if resp, body := get(t, f.proxy.URL+"/a", nil); resp.StatusCode != 200 || body != "other" {
				t.Errorf("GET /a: %d %q, want 200 from the other handler", resp.StatusCode, body)
			}
		})
	}
}
