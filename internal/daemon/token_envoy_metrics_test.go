package daemon

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenKeepsDescriptorValuesOutOfOpenMetrics: with api.token_file,
// the Envoy counters' descriptor labels that carry request values
// (detailed_metric, value_to_metric, a request's limit override: user
// IDs, API keys) are served on /metrics only to a scrape with the token,
// as the hot keys are; the labels of the config's own descriptors stay
// open, as rule names do.
func TestTokenKeepsDescriptorValuesOutOfOpenMetrics(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "api-token")
	mustWrite(t, token, "tok\n")
	mustWrite(t, filepath.Join(dir, "rl.yaml"), `domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	mustWrite(t, filepath.Join(dir, "sluice.yaml"), `listen: 127.0.0.1:0
api:
  token_file: `+token+`
grpc: {listen: 127.0.0.1:0, config: [rl.yaml]}
rules:
  - {name: keep, rate: 100000/m}
`)
	td := startDaemonFile(t, filepath.Join(dir, "sluice.yaml"))
	const user, tenant, promo, plan = "victim-user-0123", "victim-tenant-4567", "victim-promo-89", "gold"
	for _, body := range []string{
		`{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"` + user + `"}]}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"tenant","value":"` + tenant + `"},{"key":"path","value":"/x"}]}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"promo","value":"` + promo + `"}],"limit":{"requests_per_unit":5,"unit":"MINUTE"}}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"plan","value":"` + plan + `"}]}]}`,
	} {
		if got := do(t, http.MethodPost, td.api+"/json", body, "Content-Type", "application/json", "Authorization", "Bearer tok"); got.status != http.StatusOK {
			t.Fatalf("POST /json %s: %d %q, want 200", body, got.status, got.body)
		}
	}
	authorized := get(t, td.api+"/metrics", "Authorization", "Bearer tok").body
	for _, v := range []string{user, tenant, promo} {
		if !strings.Contains(authorized, v) {
			t.Errorf("GET /metrics with the token: no descriptor label with %q, want the detailed labels", v)
		}
	}
	for name, hdr := range map[string][]string{
		"without a token": nil,
		"a wrong token":   {"Authorization", "Bearer wrong"},
	} {
		open := get(t, td.api+"/metrics", hdr...)
		if open.status != http.StatusOK {
			t.Fatalf("GET /metrics %s: %d, want 200", name, open.status)
		}
		for _, v := range []string{user, tenant, promo} {
			if strings.Contains(open.body, v) {
				t.Errorf("GET /metrics %s shows the request value %q in a descriptor label, want it left out", name, v)
			}
		}
		if !strings.Contains(open.body, `sluice_envoy_hits_total{descriptor="plan",domain="d"} 1`) {
			t.Errorf("GET /metrics %s: no sluice_envoy_hits_total of the configured descriptor plan, want the config's labels shown", name)
		}
	}
}
