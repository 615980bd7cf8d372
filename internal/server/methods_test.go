package server_test

import (
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// TestWrongMethod: every endpoint with fixed methods answers another one
// 405, with an Allow header naming the right ones and the JSON error body
// of every other error; /metrics (a GET in the contract) included.
func TestWrongMethod(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/check", "POST"},
		{"PUT", "/v1/report", "POST"},
		{"POST", "/v1/rules", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
		{"DELETE", "/readyz", "GET, HEAD"},
		{"POST", "/metrics", "GET, HEAD"},
		{"PUT", "/metrics", "GET, HEAD"},
	} {
		resp, body := do(t, c.method, f.srv.URL+c.path, "", nil)
		var e struct{ Error string }
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != c.allow || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("%s %s: %d, Allow %q, body %q; want 405, Allow %q, {\"error\":…}", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), body[:min(len(body), 80)], c.allow)
		}
	}
	for _, m := range []string{"GET", "HEAD"} {
		if resp, _ := do(t, m, f.srv.URL+"/metrics", "", nil); resp.StatusCode != 200 {
			t.Errorf("%s /metrics: %d, want 200", m, resp.StatusCode)
		}
	}
}
