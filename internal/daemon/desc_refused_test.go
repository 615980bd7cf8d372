package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
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

// TestDescriptorACLRefusalLoggedOnce: descriptor files that load but that
// the Redis user's ACL refuses (a descriptor with shards: auto, for a
// user without ZADD) are one failed reload, counted and logged once, as
// a descriptor file that does not load is: each event in their directory
// rereads them, and each reread used to log the refusal again and count
// it again. Once the ACL allows ZADD, the files apply at the next
// reread; refused again after that, it is a new failure.
func TestDescriptorACLRefusalLoggedOnce(t *testing.T) {
	addr := redistest.StartServer(t).Addr
	if _, err := redistest.Do(addr, "ACL", "SETUSER", "nozadd", "on", ">pw", "~sluice:*", "&*", "+@all", "-zadd"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	desc := filepath.Join(dir, "rl.yaml")
	plain := "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	auto := "domain: d\ndescriptors:\n  - key: user\n    shards: auto\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(desc, []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\ngrpc: {listen: 127.0.0.1:0, config: [rl.yaml]}\n"+
		"store:\n  type: redis\n  redis: {addrs: ["+addr+"], timeout: 2s, username: nozadd, password: pw}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	td.waitConnected()
	failures := func() float64 { return td.metric("sluice_config_reloads_total", "result", "failure") }
	const refused = "descriptor reload refused"

	replaceFile(t, desc, auto)
	for range 3 { // as three events in the directory would
		td.d.reloadDescriptors()
	}
	if f := failures(); f != 1 {
		t.Errorf("descriptor files the ACL refuses, reread 3 times: sluice_config_reloads_total{result=failure} = %v, want 1", f)
	}
	if n := strings.Count(td.logs.String(), refused); n != 1 {
		t.Errorf("descriptor files the ACL refuses, reread 3 times: %q logged %d times, want once", refused, n)
	}
	if !strings.Contains(td.logs.String(), "ZADD") {
		t.Errorf("the refusal does not name ZADD:\n%s", td.logs.String())
	}
	if r := td.d.reloadDescriptors(); r.Err == nil && !r.Unchanged {
		t.Errorf("the refused files reread: %+v, want them refused or unchanged", r)
	}
	if td.d.cur.Load().descs.Rules() != 1 || strings.Contains(td.logs.String(), "descriptors reloaded") {
		t.Fatal("descriptors the ACL refuses put in force")
	}

	// The cause fixed, the same files apply at the next reread.
	if _, err := redistest.Do(addr, "ACL", "SETUSER", "nozadd", "+zadd"); err != nil {
		t.Fatal(err)
	}
	if r := td.d.reloadDescriptors(); r.Err != nil || r.Unchanged {
		t.Fatalf("the same files once the ACL allows ZADD: %+v, want them applied", r)
	}
	replaceFile(t, desc, plain)
	if r := td.d.reloadDescriptors(); r.Err != nil {
		t.Fatalf("back to the plain descriptor: %v", r.Err)
	}
	if _, err := redistest.Do(addr, "ACL", "SETUSER", "nozadd", "-zadd"); err != nil {
		t.Fatal(err)
	}
	replaceFile(t, desc, auto)
	td.d.reloadDescriptors()
	if f := failures(); f != 2 {
		t.Errorf("refused again after a good reload: sluice_config_reloads_total{result=failure} = %v, want 2", f)
	}
}
