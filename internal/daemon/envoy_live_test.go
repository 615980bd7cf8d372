package daemon

import (
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestEnvoyQuotaModeAndMergeDomainsReloadLive: grpc.quota_mode and
// grpc.merge_domains are read again by a config reload, as the other
// grpc: settings that are not the listener's.
func TestEnvoyQuotaModeAndMergeDomainsReloadLive(t *testing.T) {
	ed := startEnvoyDaemon(t, "")
	conf, err := os.ReadFile(ed.path)
	if err != nil {
		t.Fatal(err)
	}
	overAt4 := func(user string) rlsv3.RateLimitResponse_Code {
		var r *rlsv3.RateLimitResponse
		for range 4 {
			r = ed.ask("shop", entries("tenant", "t", "user", user), entries("region", "eu"))
		}
		return r.OverallCode
	}
	if got := overAt4("before"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("without quota_mode, a user's 4th call at 3 a year: %v, want OVER_LIMIT", got)
	}

	replaceFile(t, ed.path, string(conf)+"  quota_mode: true\n")
	if r := ed.waitReload(); r.Err != nil {
		t.Fatalf("reload turning quota_mode on: %v", r.Err)
	}
	if got := overAt4("after"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("after a reload turning quota_mode on, a user's 4th call beside a region under its limit: %v, want OK", got)
	}

	// A second file for domain shop: refused without merge_domains (the
	// descriptors in force stay), put in force by a config reload that
	// turns it on.
	extra := filepath.Join(ed.dir, "more.yaml")
	if err := os.WriteFile(extra, []byte("domain: shop\ndescriptors:\n  - key: coupon\n    rate_limit: {unit: year, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := ed.waitReload(); r.Err == nil {
		t.Fatalf("a second file for domain shop without merge_domains: reload %+v, want refused", r)
	}
	replaceFile(t, ed.path, string(conf)+"  quota_mode: true\n  merge_domains: true\n")
	if r := ed.waitReload(); r.Err != nil {
		t.Fatalf("reload turning merge_domains on: %v", r.Err)
	}
	if r := ed.ask("shop", entries("coupon", "c")); r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Errorf("after merge_domains is turned on, coupon: %v, want the second file's 1 a year", r.Statuses[0])
	}
}
