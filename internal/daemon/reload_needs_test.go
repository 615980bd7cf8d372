package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A reload refused after the ACL needs of its config were taken (here over
// a broken descriptor file, found when the rules are built) leaves the
// needs of the config in force: it used to leave its own, so that a daemon
// not yet connected to Redis checked, once Redis answered, the commands of
// the config it refused (XREADGROUP, for its defer rule), and a user whose
// ACL lacks them, which the config in force never runs, was refused the
// connection for ever ("Redis refused the connection; retrying").
func TestRefusedReloadKeepsRedisNeeds(t *testing.T) {
	rs := redistest.StartServer(t)
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "noread", "on", ">pw", "~sluice:*", "&*", "+@all", "-xreadgroup"); err != nil {
		t.Fatal(err)
	}
	gate := redistest.NewGate(t, rs.Addr)
	gate.Shut()
	dir := t.TempDir()
	desc := filepath.Join(dir, "ratelimit.yaml")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(desc, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	grpc := "grpc: {listen: 127.0.0.1:0, config: [ratelimit.yaml]}\n"
	path := filepath.Join(dir, "sluice.yaml")
	write(path, needsConfig([]string{gate.Addr}, false, "noread")+grpc)
	td := startDaemonFile(t, path)
	if td.d.lazy.Connected() {
		t.Fatal("connected through the shut gate")
	}

	// A deploy that adds a defer rule and breaks the descriptor file.
	write(desc, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	write(path, needsConfig([]string{gate.Addr}, false, "noread", "defer")+grpc)
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("reload with a broken descriptor file: %v; want it refused over the file", err)
	}
	if td.d.engine().Rules().Rule("jobs") != nil {
		t.Fatal("after the refused reload, rule jobs is in force")
	}

	gate.Open()
	waitFor(t, "Redis connected, or the connection refused", func() bool {
		return td.d.lazy.Connected() || strings.Contains(td.logs.String(), "Redis refused the connection")
	})
	if !td.d.lazy.Connected() {
		t.Errorf("Redis refused the connection of a daemon whose config in force needs no XREADGROUP: %s",
			strings.TrimSpace(td.logs.String()[strings.Index(td.logs.String(), "Redis refused"):]))
	}
}

// A descriptor file reloaded alone (the watch on grpc.config) that gives a
// descriptor shards: auto, whose hot-key sets the user's ACL may not
// write (no ZADD), is refused, naming the command and the descriptor, as
// the same change through the config file is, and the descriptors in
// force stay; once the ACL allows it, the same file applies. It used to
// apply unchecked: the descriptor's hot keys failed NOPERM at every turn.
func TestDescriptorReloadChecksRedisNeeds(t *testing.T) {
	rs := redistest.StartServer(t)
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "nozadd", "on", ">pw", "~sluice:*", "&*", "+@all", "-zadd"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	desc := filepath.Join(dir, "ratelimit.yaml")
	plain := "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000}\n"
	auto := "domain: d\ndescriptors:\n  - key: user\n    shards: auto\n    rate_limit: {unit: second, requests_per_unit: 1000}\n"
	if err := os.WriteFile(desc, []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	grpc := "grpc: {listen: 127.0.0.1:0, config: [ratelimit.yaml]}\n"
	if err := os.WriteFile(path, []byte(needsConfig([]string{rs.Addr}, false, "nozadd")+grpc), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	replaceFile(t, desc, auto)
	r := td.d.reloadDescriptors()
	if r.Err == nil || !strings.Contains(r.Err.Error(), "ZADD") || !strings.Contains(r.Err.Error(), "shards: auto") {
		t.Errorf("descriptor reload giving shards: auto to a user without ZADD: %+v; want it refused, naming ZADD and shards: auto", r)
	}
	autoInForce := func() (yes bool) {
		td.d.cur.Load().descs.Each(func(r *descriptors.Rule) { yes = yes || r.Shards.Auto })
		return yes
	}
	if autoInForce() {
		t.Errorf("after the refused descriptor reload, a shards: auto descriptor is in force")
	}
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "nozadd", "+zadd"); err != nil {
		t.Fatal(err)
	}
	if r := td.d.reloadDescriptors(); r.Err != nil {
		t.Fatalf("descriptor reload once the ACL allows ZADD: %v", r.Err)
	}
	if !autoInForce() {
		t.Errorf("after the descriptor reload, the shards: auto descriptor is not in force")
	}
}
