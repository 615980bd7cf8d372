package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStoreOutageMetricsTruth stops a real redis-server under a running
// daemon, for on_error allow and deny, and checks the metrics against the
// answers: every request the store failed is one store error and, when
// on_error decided it, one fallback of that policy; no rule counts a
// verdict it did not reach; /readyz says 503 while Redis is down and 200
// once it is back, and then decisions count again and errors do not.
func TestStoreOutageMetricsTruth(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	for _, policy := range []string{"allow", "deny"} {
		t.Run(policy, func(t *testing.T) {
			rs := redistest.StartServer(t)
			up := startUpstream(t)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: year, requests_per_unit: 100}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "sluice.yaml")
			if err := os.WriteFile(path, []byte(proxyConfig(up.url, fmt.Sprintf(`grpc: {listen: 127.0.0.1:0, config: [rl.yaml]}
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: %s
rules:
  - name: api
    match: {path: /api/*}
    rate: 100/h
    algorithm: fixed_window
  - name: watch
    match: {path: /s}
    rate: 100/h
    action: shadow
`, rs.Addr, policy))), 0o644); err != nil {
				t.Fatal(err)
			}
			ed := dialEnvoy(t, startDaemonFile(t, path))
			td := ed.testDaemon
			// Envoy asks with hits_addend 3: the hits asked for.
			envoyAsk := func() *rlsv3.RateLimitResponse {
				r, err := ed.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*commonv3.RateLimitDescriptor{entries("user", "u")}})
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v", err)
				}
				return r
			}
			hits := func() float64 { return td.metric("sluice_envoy_hits_total", "domain", "d", "descriptor", "user") }
			decisions := func() float64 { return td.metric("sluice_decisions_total") }
			for _, u := range []string{td.proxy + "/api/a", td.proxy + "/s"} {
				if r := get(t, u); r.status != http.StatusOK {
					t.Fatalf("GET %s with Redis up: %d", u, r.status)
				}
			}
			if _, st := check(t, td.api, "api", "k", 1); st != http.StatusOK {
				t.Fatalf("POST /v1/check with Redis up: %d", st)
			}
			if d := decisions(); d != 3 {
				t.Fatalf("sluice_decisions_total = %v with Redis up, want the 3 verdicts", d)
			}
			if r := envoyAsk(); r.OverallCode != rlsv3.RateLimitResponse_OK || hits() != 3 {
				t.Fatalf("Envoy with Redis up: %v, sluice_envoy_hits_total = %v; want OK, 3", r.OverallCode, hits())
			}

			rs.Stop()
			want := http.StatusOK
			if policy == "deny" {
				want = http.StatusServiceUnavailable
			}
			decided := 0 // requests on_error answered
			for range 5 {
				if r := get(t, td.proxy+"/api/b"); r.status != want {
					t.Errorf("GET /api/b with Redis down, on_error %s: %d, want %d", policy, r.status, want)
				}
				decided++
			}
			for range 3 {
				a, st := check(t, td.api, "api", "k", 1)
				if policy == "allow" && (st != http.StatusOK || !a.Allowed) || policy == "deny" && st != http.StatusServiceUnavailable {
					t.Errorf("POST /v1/check with Redis down, on_error %s: %d %+v", policy, st, a)
				}
				decided++
			}
			wantCode := map[string]rlsv3.RateLimitResponse_Code{"allow": rlsv3.RateLimitResponse_OK, "deny": rlsv3.RateLimitResponse_OVER_LIMIT}[policy]
			for range 2 {
				if r := envoyAsk(); r.OverallCode != wantCode {
					t.Errorf("Envoy with Redis down, on_error %s: %v, want %v", policy, r.OverallCode, wantCode)
				}
				decided++
			}
			if got := hits(); got != 3+2*3 {
				t.Errorf("sluice_envoy_hits_total = %v after 2 requests of 3 hits the store could not decide, want %v (the hits asked for)", got, 3+2*3)
			}
			// A shadow rule never blocks, Redis or not: its failed call is a
			// store error, but on_error decided nothing.
			for range 2 {
				if r := get(t, td.proxy+"/s"); r.status != http.StatusOK {
					t.Errorf("GET /s (shadow rule only) with Redis down, on_error %s: %d, want 200", policy, r.status)
				}
			}
			if got := td.metric("sluice_store_errors_total"); got != float64(decided+2) {
				t.Errorf("sluice_store_errors_total = %v, want %d (one per failed store call)", got, decided+2)
			}
			other := map[string]string{"allow": "deny", "deny": "allow"}[policy]
			if got := td.metric("sluice_store_fallback_total", "policy", policy); got != float64(decided) {
				t.Errorf("sluice_store_fallback_total{policy=%s} = %v, want %d", policy, got, decided)
			}
			if got := td.metric("sluice_store_fallback_total", "policy", other); got != 0 {
				t.Errorf("sluice_store_fallback_total{policy=%s} = %v, want 0", other, got)
			}
			if d := decisions(); d != 3 {
				t.Errorf("sluice_decisions_total = %v after requests the store could not decide, want still 3", d)
			}
			if r := get(t, td.api+"/readyz"); r.status != http.StatusServiceUnavailable {
				t.Errorf("GET /readyz with Redis down: %d, want 503", r.status)
			}
			if r := get(t, td.api+"/healthz"); r.status != http.StatusOK {
				t.Errorf("GET /healthz with Redis down: %d, want 200", r.status)
			}

			rs.Restart()
			waitFor(t, "/readyz 200 once Redis is back", func() bool { return get(t, td.api+"/readyz").status == http.StatusOK })
			errs := td.metric("sluice_store_errors_total")
			for _, u := range []string{td.proxy + "/api/c", td.proxy + "/s"} {
				if r := get(t, u); r.status != http.StatusOK {
					t.Errorf("GET %s with Redis back: %d", u, r.status)
				}
			}
			if d := decisions(); d != 5 {
				t.Errorf("sluice_decisions_total = %v with Redis back, want 5 (2 more verdicts)", d)
			}
			if got := td.metric("sluice_store_errors_total"); got != errs {
				t.Errorf("sluice_store_errors_total moved %v → %v with Redis back", errs, got)
			}
		})
	}
}
