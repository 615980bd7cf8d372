package daemon

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenKeepsKeysOutOfOpenMetrics: with api.token_file, /metrics stays
// open for scrapers, but the clients' keys it can show (the hot keys of
// sluice_hot_key_rate: API keys, tenants, client addresses) are served
// only to a scrape that carries the token, as GET /v1/hotkeys is: they
// let whoever reads them spend, or use, another client's key.
func TestTokenKeepsKeysOutOfOpenMetrics(t *testing.T) {
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "tok\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100000/m}\n"))
	const key = "victim-api-key-0123"
	authorized := func() string { return get(t, td.api+"/metrics", "Authorization", "Bearer tok").body }
	// Checks until the key is hot enough to show (decisions are sampled).
	for !strings.Contains(authorized(), key) {
		if got := do(t, http.MethodPost, td.api+"/v1/check", `{"rule":"keep","key":"`+key+`"}`,
			"Content-Type", "application/json", "Authorization", "Bearer tok"); got.status != http.StatusOK {
			t.Fatalf("POST /v1/check with the token: %d %q, want 200", got.status, got.body)
		}
	}
	if !strings.Contains(authorized(), "sluice_hot_key_rate{") {
		t.Errorf("GET /metrics with the token: no sluice_hot_key_rate, want the hot keys")
	}
	for name, hdr := range map[string][]string{
		"without a token": nil,
		"a wrong token":   {"Authorization", "Bearer wrong"},
	} {
		open := get(t, td.api+"/metrics", hdr...)
		if open.status != http.StatusOK || !strings.Contains(open.body, `sluice_decisions_total{result="allowed",rule="keep"}`) {
			t.Errorf("GET /metrics %s: %d, sluice_decisions_total shown %v; want 200 with the other metrics", name, open.status, strings.Contains(open.body, "sluice_decisions_total"))
		}
		if strings.Contains(open.body, key) || strings.Contains(open.body, "sluice_hot_key_rate{") {
			t.Errorf("GET /metrics %s shows the hot keys (%s), want them left out", name, key)
		}
	}
}
