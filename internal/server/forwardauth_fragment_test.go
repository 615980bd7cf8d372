package server_test

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// A '#' in the original URI hides no query parameter: Go's server (and
// PHP through Caddy's php_fastcgi) reads the query on past it, so that
// "/items?x=1#&api_key=victim" and "/items#x?api_key=victim", which
// nginx and Caddy pass on to the app as they came, are api_key=victim to
// a Go app. Once victim is spent, both are refused, as is a fresh value
// beside it; the fragment-free reading (Node, Puma, nginx's $args) is
// counted too.
func TestForwardAuthQueryPastFragment(t *testing.T) {
	srv := forwardAuthServer(t, rules.Spec{Name: "by-query", Key: []string{"query:api_key"}, Rate: "1/m", Algorithm: "fixed_window"})
	ask := func(uri string) (int, string) {
		t.Helper()
		resp, body := do(t, "GET", srv.URL+"/v1/forward-auth", "", map[string]string{"X-Forwarded-Uri": uri})
		return resp.StatusCode, body
	}
	if st, body := ask("/items?api_key=victim"); st != 200 {
		t.Fatalf("first: %d %q, want 200", st, body)
	}
	for _, uri := range []string{
		"/items?x=1#&api_key=victim",
		"/items#x?api_key=victim",
		"/items?api_key=fresh#&api_key=victim",
		"/items?api_key=victim#fresh",
		"/items?api_key=victim#&api_key=fresh2",
	} {
		if st, body := ask(uri); st != http.StatusTooManyRequests {
			t.Errorf("%s after victim was spent: %d %q, want 429", uri, st, body)
		}
	}
	// Nor can a client's own X-Forwarded-Uri, passed on beside a
	// gateway's X-Original-URI, hide the query past the '#' from the
	// rules: the two disagree on the query, so the request is refused.
	resp, _ := do(t, "GET", srv.URL+"/v1/forward-auth", "", map[string]string{"X-Forwarded-Uri": "/items?x=1#zzz", "X-Original-Uri": "/items?x=1#&api_key=victim"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("X-Forwarded-Uri /items?x=1#zzz beside X-Original-URI /items?x=1#&api_key=victim: %d, want 400", resp.StatusCode)
	}
	// A fresh value is a fresh count, fragment or not.
	if st, body := ask("/items?api_key=other#1"); st != 200 {
		t.Errorf("/items?api_key=other#1: %d %q, want 200", st, body)
	}
}
