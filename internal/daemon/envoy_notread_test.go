package daemon

import (
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
