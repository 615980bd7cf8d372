package daemon

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDescriptorRefusalCountedOnce: a descriptor file refused is one
// failed reload, counted and logged once, as a refused config file is:
// the watch reloads the descriptors at every event in their directory
// (the config file's own, a ConfigMap's other keys), and each reread of
// the same broken file was counted again in
// sluice_config_reloads_total{result="failure"} and logged again. The
// same broken content refused again after a good one is a new failure.
func TestDescriptorRefusalCountedOnce(t *testing.T) {
	dir := t.TempDir()
	desc := filepath.Join(dir, "rl.yaml")
	good := "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	bad := "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hourz, requests_per_unit: 2}\n"
	if err := os.WriteFile(desc, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc: {listen: 127.0.0.1:0, config: [rl.yaml]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	failures := func() float64 { return td.metric("sluice_config_reloads_total", "result", "failure") }

	replaceFile(t, desc, bad)
	for range 3 { // as three events in the directory would
		td.d.reloadDescriptors()
	}
	if f := failures(); f != 1 {
		t.Errorf("one broken descriptor file, reread 3 times: sluice_config_reloads_total{result=failure} = %v, want 1", f)
	}
	if r := td.d.reloadDescriptors(); r.Err == nil && !r.Unchanged {
		t.Errorf("the broken file reread: %+v, want it refused or unchanged", r)
	}
	replaceFile(t, desc, good+"  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	if r := td.d.reloadDescriptors(); r.Err != nil {
		t.Fatalf("a good descriptor file: %v", r.Err)
	}
	replaceFile(t, desc, bad)
	td.d.reloadDescriptors()
	if f := failures(); f != 2 {
		t.Errorf("the broken file again after a good one: sluice_config_reloads_total{result=failure} = %v, want 2", f)
	}
}
