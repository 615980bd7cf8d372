package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestReportEndToEnd: the daemon, started from files, charges an Envoy
// descriptor with report: true past its limit (the stream-done call of an
// LLM route) and refuses the next checks; the HTTP API's /v1/report does
// the same for a rule. On memory, Redis and a Redis Cluster.
func TestReportEndToEnd(t *testing.T) {
	t.Parallel() // a Cluster (or Redis) and daemons of its own
	for _, kind := range []string{"memory", "redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			store := storeBlock(t, kind)
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "ratelimit"), 0o755)
			os.WriteFile(filepath.Join(dir, "ratelimit", "llm.yaml"), []byte(`domain: llm
descriptors:
  - key: team
    report: true
    algorithm: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 100}
`), 0o644)
			path := filepath.Join(dir, "sluice.yaml")
			os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\nrules:\n  - name: tokens\n    rate: 1000/h\n    algorithm: gcra\n"+store), 0o644)
			ed := dialEnvoy(t, startDaemonFile(t, path))
			td, rls := ed.testDaemon, ed.rls
			ask := func(tokens uint64, withRoute bool) *rlsv3.RateLimitResponse {
				t.Helper()
				d := entries("team", "a")
				d.HitsAddend = wrapperspb.UInt64(tokens)
				ds := []*commonv3.RateLimitDescriptor{d}
				if withRoute {
					ds = append(ds, entries("route", "/v1/chat"))
				}
				r, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: ds})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			routeLeft := func() uint32 {
				d := entries("route", "/v1/chat")
				d.HitsAddend = wrapperspb.UInt64(0)
				r, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*commonv3.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatal(err)
				}
				return r.Statuses[0].LimitRemaining
			}
			if r := ask(0, true); r.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("the check before the response: %v, want OK", r)
			}
			left := routeLeft()
			// The stream ended: 2,500 tokens against 1,000 an hour.
			if r := ask(2500, false); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("the report of 2500 tokens: %v, want OVER_LIMIT (charged, over)", r)
			}
			for i := range 3 {
				if r := ask(0, true); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("check #%d after the report: %v, want OVER_LIMIT by the token budget", i+1, r)
				}
			}
			if got := routeLeft(); got != left {
				t.Fatalf("the route's remaining went from %d to %d while the budget refused: denied calls must count nothing", left, got)
			}

			// The HTTP decision API.
			r := do(t, "POST", td.api+"/v1/report", `{"rule":"tokens","key":"team-b","cost":1500}`)
			if r.status != 200 || !strings.Contains(r.body, `"allowed":false`) {
				t.Fatalf("POST /v1/report 1500 against 1000/h: %d %s, want 200 not allowed", r.status, r.body)
			}
			if a, status := check(t, td.api, "tokens", "team-b", 0); status != 200 || a.Allowed {
				t.Fatalf("/v1/check after the report: %d %+v, want refused", status, a)
			}
		})
	}
}
