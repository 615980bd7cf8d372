package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
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

// A reload refused after its ACL check passed (here over a broken
// descriptor file, found when the rules are built) leaves the needs that
// /readyz checks those of the config in force. The check made them the
// store's as soon as it passed: a deploy that dropped the defer rule and
// was refused left /readyz ready while the defer rule still in force
// failed NOPERM (its commands no longer checked), and one that added a
// defer rule made /readyz fail for a rule never in force.
func TestRefusedReloadKeepsReadyzNeeds(t *testing.T) {
	rs := redistest.StartServer(t)
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "deferer", "on", ">pw", "~sluice:*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	desc := filepath.Join(dir, "ratelimit.yaml")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	broken := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n"
	grpc := "grpc: {listen: 127.0.0.1:0, config: [ratelimit.yaml]}\n"
	path := filepath.Join(dir, "sluice.yaml")
	write(desc, good)
	write(path, needsConfig([]string{rs.Addr}, false, "deferer", "defer")+grpc)
	td := startDaemonFile(t, path)
	ping := func() error { return td.d.lazy.Ping(context.Background()) }
	if err := ping(); err != nil {
		t.Fatalf("Ping with the ACL allowing all: %v", err)
	}

	// A deploy that drops the defer rule and breaks the descriptor file:
	// refused, the defer rule stays in force.
	write(desc, broken)
	write(path, needsConfig([]string{rs.Addr}, false, "deferer")+grpc)
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("reload with a broken descriptor file: %v; want it refused over the file", err)
	}
	if td.d.engine().Rules().Rule("jobs") == nil {
		t.Fatal("after the refused reload, rule jobs is no longer in force")
	}
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "deferer", "-xreadgroup"); err != nil {
		t.Fatal(err)
	}
	if err := ping(); !errors.Is(err, redisstore.ErrAuth) || !strings.Contains(err.Error(), "XREADGROUP") {
		t.Errorf("Ping once the ACL lacks XREADGROUP, the defer rule in force: %v; want ErrAuth naming XREADGROUP", err)
	}

	// The other way: in force without the defer rule, a refused reload
	// that adds it leaves /readyz blind to XREADGROUP.
	write(desc, good)
	if err := td.d.Reload(); err != nil {
		t.Fatalf("reload dropping the defer rule: %v", err)
	}
	if err := ping(); err != nil {
		t.Fatalf("Ping without the defer rule in force: %v", err)
	}
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "deferer", "+xreadgroup"); err != nil {
		t.Fatal(err)
	}
	write(desc, broken)
	write(path, needsConfig([]string{rs.Addr}, false, "deferer", "defer")+grpc)
	if err := td.d.Reload(); err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("reload adding the defer rule with a broken descriptor file: %v; want it refused over the file", err)
	}
	if _, err := redistest.Do(rs.Addr, "ACL", "SETUSER", "deferer", "-xreadgroup"); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err != nil {
		t.Errorf("Ping once the ACL lacks XREADGROUP, no defer rule in force: %v; want nil", err)
	}
}
