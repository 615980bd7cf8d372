package daemon

import (
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestEnvoyResponseHeadersKey: grpc.response_headers: true makes the
// service's answers carry the rate-limit headers (response_headers_to_add),
// the tightest descriptor's, with Retry-After once over the limit; without
// the key they carry none.
func TestEnvoyResponseHeadersKey(t *testing.T) {
	headers := func(r *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	for _, on := range []bool{true, false} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(envoyDescriptors), 0o644); err != nil {
			t.Fatal(err)
		}
		yaml := "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [shop.yaml]\n"
		if on {
			yaml += "  response_headers: true\n"
		}
		path := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		ed := dialEnvoy(t, startDaemonFile(t, path))
		// region (100 a year) and the /img/* path (2 a year): the path's
		// figures are the tightest.
		first := headers(ed.ask("shop", entries("region", "eu"), entries("path", "/img/a.png")))
		ed.ask("shop", entries("path", "/img/a.png"))
		over := ed.ask("shop", entries("region", "eu"), entries("path", "/img/a.png"))
		if over.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("response_headers %v: third request to a limit of 2: %v, want OVER_LIMIT", on, over.OverallCode)
		}
		last := headers(over)
		if !on {
			if len(first) != 0 || len(last) != 0 {
				t.Errorf("without response_headers: headers %v and %v, want none", first, last)
			}
			continue
		}
		for k, v := range map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "RateLimit-Limit": "2", "RateLimit-Remaining": "1"} {
			if first[k] != v {
				t.Errorf("response_headers: true, first answer: %s = %q, want %q; all %v", k, first[k], v, first)
			}
		}
		if _, ok := first["Retry-After"]; ok {
			t.Errorf("response_headers: true: Retry-After on an allowed answer: %v", first)
		}
		if last["Retry-After"] == "" || last["X-RateLimit-Retry-After"] != last["Retry-After"] || last["X-RateLimit-Remaining"] != "0" {
			t.Errorf("response_headers: true, over the limit: %v, want Retry-After, X-RateLimit-Retry-After the same, X-RateLimit-Remaining 0", last)
		}
	}
}
