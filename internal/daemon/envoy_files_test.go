package daemon

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvoyWarnsOfEntriesNotRead: serve logs each entry of a listed
// directory it does not read, at startup and on every reload: the
// reference service reads every file under its directory, so each may
// hold a domain it served, which Sluice would answer OK, unknown.
func TestEnvoyWarnsOfEntriesNotRead(t *testing.T) {
	dir := t.TempDir()
	descDir := filepath.Join(dir, "ratelimit")
	if err := os.Mkdir(descDir, 0o755); err != nil {
		t.Fatal(err)
	}
	shop := filepath.Join(descDir, "shop.yaml")
	other := filepath.Join(descDir, "other.conf")
	for p, s := range map[string]string{shop: envoyDescriptors, other: "domain: other\n"} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	if want := "warning: " + other + ": not read"; !strings.Contains(td.logs.String(), want) {
		t.Errorf("startup logs lack %q:\n%s", want, td.logs.String())
	}
	sub := filepath.Join(descDir, "team")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	replaceFile(t, shop, envoyDescriptors+"  - key: coupon\n    rate_limit: {unit: year, requests_per_unit: 1}\n")
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if want := "warning: " + sub + ": not read: a subdirectory"; !strings.Contains(td.logs.String(), want) {
		t.Errorf("logs after the reload lack %q:\n%s", want, td.logs.String())
	}
}

// TestEnvoyMergeDomains: with grpc.merge_domains, as with the reference
// service's MERGE_DOMAIN_CONFIG, a domain's descriptors may come from
// several files; without it, such files are refused.
func TestEnvoyMergeDomains(t *testing.T) {
	dir := t.TempDir()
	descDir := filepath.Join(dir, "ratelimit")
	if err := os.Mkdir(descDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
	} {
		if err := os.WriteFile(filepath.Join(descDir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := configLoad(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDescriptors(cfg); err == nil || !strings.Contains(err.Error(), `domain "d" is already configured in`) {
		t.Errorf("a domain in two files without merge_domains: %v, want refused", err)
	}
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit]\n  merge_domains: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ed := dialEnvoy(t, startDaemonFile(t, path))
	for key, want := range map[string]uint32{"a": 1, "b": 2} {
		if r := ed.ask("d", entries(key, "x")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != want {
			t.Errorf("merged domain, key %s: %v, want %d a minute", key, r.Statuses[0], want)
		}
	}
}

// TestEnvoyGlobalQuotaMode: grpc.quota_mode puts every descriptor in
// quota mode: a user over its limit is let through while the region
// descriptor of the same request is under its own.
func TestEnvoyGlobalQuotaMode(t *testing.T) {
	ed := startEnvoyDaemon(t, "  quota_mode: true\n") // inside the grpc: block
	for i := range 4 {
		r := ed.ask("shop", entries("tenant", "t", "user", "u"), entries("region", "eu"))
		wantUser := rlsv3.RateLimitResponse_OK
		if i == 3 {
			wantUser = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].Code != wantUser || r.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
			t.Errorf("call %d, user limit 3, region 100: %v, statuses %v; want OK overall, user %v", i+1, r.OverallCode, r.Statuses, wantUser)
		}
	}
	if r := ed.ask("shop", entries("tenant", "t", "user", "u")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the user alone, over: %v, want OVER_LIMIT (every quota descriptor over)", r.OverallCode)
	}
}
