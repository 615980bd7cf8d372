package server_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// Forward auth reads a method override as the proxy does: the gateway
// passes the client's headers on, and a POST (X-Forwarded-Method or
// X-Original-Method) carrying X-HTTP-Method-Override: DELETE, or a query
// _method=DELETE, is served as a DELETE by frameworks that read them, so
// it is counted by a rule for DELETE (and, keyed by method, under both
// POST and DELETE): once DELETE's one a minute is spent, such a POST is
// refused 429. A GET's override is not read, as frameworks read only a
// POST's.
func TestForwardAuthMethodOverride(t *testing.T) {
	srv := forwardAuthServer(t,
		rules.Spec{Name: "deletes", Match: rules.MatchSpec{Methods: []string{"DELETE"}, Path: "/items/*"}, Rate: "1/m", Algorithm: "fixed_window"},
	)
	ask := func(method, uri string, hdr http.Header) int {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/forward-auth", nil)
		for k, vv := range hdr {
			req.Header[k] = vv
		}
		req.Header["X-Forwarded-Method"] = []string{method}
		req.Header["X-Forwarded-Uri"] = []string{uri}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if got := ask("DELETE", "/items/1", nil); got != 200 {
		t.Fatalf("DELETE /items/1: %d, want 200 (the rule's one a minute)", got)
	}
	for _, c := range []struct {
		uri string
		hdr http.Header
	}{
		{"/items/1", http.Header{"X-Http-Method-Override": {"DELETE"}}},
		{"/items/1", http.Header{"X-Http-Method": {"delete"}}},
		{"/items/1", http.Header{"X-Method-Override": {"DELETE"}}},
		{"/items/1?_method=DELETE", nil},
	} {
		if got := ask("POST", c.uri, c.hdr); got != 429 {
			t.Errorf("POST %s %v: %d, want 429 (served as a DELETE, past the rule's one a minute)", c.uri, c.hdr, got)
		}
	}
	if got := ask("GET", "/items/1", http.Header{"X-Http-Method-Override": {"DELETE"}}); got != 200 {
		t.Errorf("GET /items/1 with X-HTTP-Method-Override: DELETE: %d, want 200 (a GET's override is not read)", got)
	}
}
