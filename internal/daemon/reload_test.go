package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

const reloadBase = `
listen: 127.0.0.1:0
rules:
  - name: keep
    rate: 3/m
    algorithm: token_bucket
`

// replaceFile writes content to a sibling and renames it over path, as
// editors and config management do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func rulesInForce(t *testing.T, td *testDaemon) string {
	t.Helper()
	r := get(t, td.api+"/v1/rules")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/rules: %d", r.status)
	}
	return r.body
}

func TestHotReload(t *testing.T) {
	td := startDaemon(t, reloadBase)
	for range 2 {
		if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed {
			t.Fatalf("keep: %+v, want allowed", a)
		}
	}

	// A valid change, written in place (appended with one write, so no
	// reader can see a half-written file): a new rule; keep unchanged, so
	// its counter carries on.
	appendFile(t, td.path, `
  - name: added
    rate: 1/m
`)
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("valid in-place change: reload error %v", r.Err)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed || a.Remaining != 0 {
		t.Errorf("keep after reload: %+v, want allowed with remaining 0 (counter kept across the reload)", a)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); a.Allowed {
		t.Errorf("keep after reload, 4th request: %+v, want denied (limit 3)", a)
	}
	if a, status := check(t, td.api, "added", "k", 1); status != http.StatusOK || !a.Allowed {
		t.Errorf("added after reload: %d %+v, want allowed", status, a)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "success"); got != 1 {
		t.Errorf("sluice_config_reloads_total{result=success} = %v, want 1", got)
	}

	// Changing keep's limit changes its fingerprint: fresh counters.
	replaceFile(t, td.path, strings.Replace(reloadBase, "3/m", "5/m", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("rename-replace: reload error %v", r.Err)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed || a.Limit != 5 || a.Remaining != 4 {
		t.Errorf("keep after its rate changed to 5/m: %+v, want allowed, limit 5, remaining 4 (fresh counter)", a)
	}
	if body := rulesInForce(t, td); strings.Contains(body, `"added"`) {
		t.Errorf("GET /v1/rules after removing added: %s", body)
	}

	// An invalid change is refused, logged with file:line, counted; the
	// old rules stay.
	replaceFile(t, td.path, reloadBase+`
  - name: broken
    rate: banana
`)
	r := td.waitReload()
	var ce config.Errors
	if !errors.As(r.Err, &ce) {
		t.Fatalf("invalid change: reload error %v, want config.Errors", r.Err)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 1 {
		t.Errorf("sluice_config_reloads_total{result=failure} = %v, want 1", got)
	}
	if logs := td.logs.String(); !strings.Contains(logs, "sluice.yaml:") || !strings.Contains(logs, "rate") {
		t.Errorf("logs after the invalid change do not name file:line and key:\n%s", logs)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed || a.Limit != 5 || a.Remaining != 3 {
		t.Errorf("keep after the refused change: %+v, want the old rule (limit 5, remaining 3)", a)
	}

	// A change that needs a restart is refused too.
	replaceFile(t, td.path, strings.Replace(reloadBase, "127.0.0.1:0", "127.0.0.1:1", 1))
	if r := td.waitReload(); !errors.Is(r.Err, errRestartOnly) || !strings.Contains(r.Err.Error(), "listen") {
		t.Errorf("listen change: reload error %v, want a refusal naming listen", r.Err)
	}
	// So is a feature this daemon cannot run (here: defer needs Redis).
	replaceFile(t, td.path, strings.Replace(reloadBase, "algorithm: token_bucket", "algorithm: token_bucket\n    action: defer", 1))
	if r := td.waitReload(); r.Err == nil || !strings.Contains(r.Err.Error(), "rules[0].action") {
		t.Errorf("action: defer: reload error %v, want a refusal naming rules[0].action", r.Err)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 3 {
		t.Errorf("sluice_config_reloads_total{result=failure} = %v, want 3", got)
	}

	// Back to a valid config; then touching it without changing the
	// content reloads nothing, while Reload (SIGHUP) always applies.
	good := strings.Replace(reloadBase, "3/m", "5/m", 1)
	replaceFile(t, td.path, good)
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("back to valid: %v", r.Err)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); a.Remaining != 2 {
		t.Errorf("keep after going back to the same rule: %+v, want remaining 2 (same fingerprint, same counter)", a)
	}
	replaceFile(t, td.path, good)
	select {
	case r := <-td.reloads:
		if !r.Unchanged {
			t.Errorf("rewriting the same content: %+v, want Unchanged", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload attempt within 10s after rewriting the file")
	}
	if err := td.d.Reload(); err != nil {
		t.Errorf("Reload: %v", err)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "success"); got != 4 {
		t.Errorf("sluice_config_reloads_total{result=success} = %v, want 4 (in-place, rename, back, SIGHUP)", got)
	}
}

// TestHotReloadSymlinkSwap mounts the config as Kubernetes does a
// ConfigMap and swaps the ..data link.
func TestHotReloadSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "..v1"))
	mustWrite(t, filepath.Join(dir, "..v1", "sluice.yaml"), reloadBase)
	mustSymlink(t, "..v1", filepath.Join(dir, "..data"))
	path := filepath.Join(dir, "sluice.yaml")
	mustSymlink(t, filepath.Join("..data", "sluice.yaml"), path)
	td := startDaemonFile(t, path)

	mustMkdir(t, filepath.Join(dir, "..v2"))
	mustWrite(t, filepath.Join(dir, "..v2", "sluice.yaml"), strings.Replace(reloadBase, "name: keep", "name: swapped", 1))
	mustSymlink(t, "..v2", filepath.Join(dir, "..data_tmp"))
	mustRename(t, filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data"))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("symlink swap: reload error %v", r.Err)
	}
	if body := rulesInForce(t, td); !strings.Contains(body, `"swapped"`) || strings.Contains(body, `"keep"`) {
		t.Errorf("GET /v1/rules after the swap: %s, want rule swapped only", body)
	}
}

// TestReloadKeepsOverrides: listen addresses from the command line are
// applied again on every reload, so a reload of a config whose own listen
// differs from the bound address is not refused as a change of address.
func TestReloadKeepsOverrides(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	write := func(rate string) {
		data := "listen: " + held.Addr().String() + "\nrules:\n  - {name: r, rate: " + rate + "}\n"
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1/s")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	over := config.Overrides{Listen: "127.0.0.1:0"}
	if err := over.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{ConfigPath: path, Overrides: over})
	if err != nil {
		t.Fatalf("New with -listen 127.0.0.1:0 while the config's address is held: %v", err)
	}
	defer d.Close()
	write("2/s")
	if err := d.Reload(); err != nil {
		t.Fatalf("Reload with overrides: %v, want nil", err)
	}
	if got := d.Config().Listen; got != "127.0.0.1:0" {
		t.Errorf("after reload, listen = %q, want the override 127.0.0.1:0", got)
	}
	if r := d.Config().Rules[0].Rate; r != "2/s" {
		t.Errorf("after reload, rate = %q, want 2/s", r)
	}
}

// TestRestartOnlyDefer: the defer queue's settings are read once, when its
// workers start, so a reload that changes them is refused, naming them.
func TestRestartOnlyDefer(t *testing.T) {
	parse := func(extra string) *config.Config {
		t.Helper()
		c, err := config.Parse("sluice.yaml", []byte("rules: [{name: a, rate: 1/s}]\n"+extra))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := parse("")
	if got := restartOnly(old, parse("defer: {claim_idle: 30s}\n")); len(got) != 0 {
		t.Errorf("defer.claim_idle written as its default: restartOnly = %v, want none", got)
	}
	if got := restartOnly(old, parse("defer: {max_attempts: 9}\n")); len(got) != 1 || got[0] != "defer.max_attempts" {
		t.Errorf("defer.max_attempts changed: restartOnly = %v, want [defer.max_attempts]", got)
	}
}

// TestHotReloadDirectorySymlinkSwap: the config's directory is a symlink
// swapped at each release (Capistrano's current -> releases/N, or /etc/sluice
// -> a versioned directory). The swap happens in the directory holding the
// link, neither the config's directory (the link itself) nor its target's:
// the watcher must watch where every link on the path lives, and follow the
// new target afterwards.
func TestHotReloadDirectorySymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "releases"))
	mustMkdir(t, filepath.Join(dir, "releases", "1"))
	mustWrite(t, filepath.Join(dir, "releases", "1", "sluice.yaml"), reloadBase)
	mustSymlink(t, filepath.Join("releases", "1"), filepath.Join(dir, "current"))
	path := filepath.Join(dir, "current", "sluice.yaml")
	td := startDaemonFile(t, path)

	mustMkdir(t, filepath.Join(dir, "releases", "2"))
	mustWrite(t, filepath.Join(dir, "releases", "2", "sluice.yaml"), strings.Replace(reloadBase, "name: keep", "name: release2", 1))
	mustSymlink(t, filepath.Join("releases", "2"), filepath.Join(dir, "current.tmp"))
	mustRename(t, filepath.Join(dir, "current.tmp"), filepath.Join(dir, "current"))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("directory symlink swap: reload error %v", r.Err)
	}
	if body := rulesInForce(t, td); !strings.Contains(body, `"release2"`) || strings.Contains(body, `"keep"`) {
		t.Fatalf("GET /v1/rules after the swap: %s, want rule release2 only", body)
	}

	// The new release's directory is watched now, the old one no more.
	mustWrite(t, filepath.Join(dir, "releases", "1", "sluice.yaml"), strings.Replace(reloadBase, "name: keep", "name: stale", 1))
	mustWrite(t, filepath.Join(dir, "releases", "2", "sluice.yaml"), strings.Replace(reloadBase, "name: keep", "name: edited", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("edit after the swap: reload error %v", r.Err)
	}
	if body := rulesInForce(t, td); !strings.Contains(body, `"edited"`) {
		t.Errorf("GET /v1/rules after editing the new release: %s, want rule edited", body)
	}
}

// TestReloadChangeBeforeWatch: the file changes after serve read it and
// before the daemon starts watching it (New opens the store and builds the
// rules in between). The daemon must not take the new content for the one
// it runs: it applies it once it runs, rather than running the old rules
// while the file says otherwise, until the next edit.
func TestReloadChangeBeforeWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mustWrite(t, path, reloadBase)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, path, strings.Replace(reloadBase, "name: keep", "name: newer", 1))

	reloads := make(chan ReloadResult, 16)
	d, err := New(cfg, Options{ConfigPath: path, ReloadDebounce: 20 * time.Millisecond,
		OnReload: func(r ReloadResult) { reloads <- r }})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-reloads:
			if r.Err != nil {
				t.Fatalf("reload: %v", r.Err)
			}
			if r.Unchanged || r.Writing {
				continue
			}
			if got := d.Config().Rules[0].Name; got != "newer" {
				t.Fatalf("after the reload, rule %q in force, want newer", got)
			}
			return
		case <-deadline:
			t.Fatalf("no reload within 10s: rule %q in force while the file names newer", d.Config().Rules[0].Name)
		}
	}
}

// TestReloadHugeFileBounded: a reload reads at most config.MaxConfigBytes
// (and one byte more, to tell), as Load does: a file swapped for a huge
// one (a log copied over it, a link to a disk image) is refused with the
// size named, without reading it all into memory first.
func TestReloadHugeFileBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20 // sparse: no disk used
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	applied := 0
	r := newReloader(path, [32]byte{}, func(data []byte, _ func() bool) error {
		applied++
		_, err := config.Parse(path, data)
		return err
	}, slog.New(slog.DiscardHandler), func(bool) {}, nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := r.reload(true)
	runtime.ReadMemStats(&after)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "larger than") {
		t.Errorf("reload of a %d-byte file: %v, want a refusal naming its size", size, res.Err)
	}
	// Reading up to the limit allocates a few times MaxConfigBytes (4 MiB);
	// reading the file whole, its size at least. Other tests running in
	// parallel allocate too: the bound leaves them room.
	if got := after.TotalAlloc - before.TotalAlloc; got > size/4 {
		t.Errorf("reload of a %d-byte file allocated %d bytes, want at most %d (the file read up to the limit only)", size, got, size/4)
	}
}

// TestHotReloadDirectoryReplaced: the config's directory itself is
// replaced (moved away and another renamed in its place, as a deploy that
// stages a whole directory does), or deleted and made again. inotify drops
// a watch whose directory moves or goes: the watcher must notice, and
// watch the new directory, not keep believing it watches the old one.
func TestHotReloadDirectoryReplaced(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "conf")
	mustMkdir(t, conf)
	path := filepath.Join(conf, "sluice.yaml")
	mustWrite(t, path, reloadBase)
	td := startDaemonFile(t, path)
	named := func(name string) string { return strings.Replace(reloadBase, "name: keep", "name: "+name, 1) }
	// waitRule waits for a reload that puts rule name in force; a reload
	// refused while the file was missing for a moment is skipped.
	waitRule := func(step, name string) {
		t.Helper()
		for {
			if r := td.waitReload(); r.Err != nil {
				continue
			}
			if body := rulesInForce(t, td); strings.Contains(body, `"`+name+`"`) {
				return
			}
		}
	}

	mustMkdir(t, filepath.Join(dir, "conf.new"))
	mustWrite(t, filepath.Join(dir, "conf.new", "sluice.yaml"), named("second"))
	mustRename(t, conf, filepath.Join(dir, "conf.old"))
	mustRename(t, filepath.Join(dir, "conf.new"), conf)
	waitRule("directory replaced", "second")
	mustWrite(t, path, named("third"))
	waitRule("edit in the new directory", "third")

	if err := os.RemoveAll(conf); err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, conf)
	mustWrite(t, path, named("fourth"))
	waitRule("directory deleted and made again", "fourth")
	mustWrite(t, path, named("fifth"))
	waitRule("edit in the remade directory", "fifth")
}

// TestRefusedReloadLeavesNoTrace: a reload refused late (here the Envoy
// descriptor files it reads again are broken, found after the new rules
// were built) leaves nothing of the refused config in force: not its
// rules, and not the hot-key summaries of its new rules in
// GET /v1/hotkeys.
func TestRefusedReloadLeavesNoTrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	const base = "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [rl.yaml]\nrules:\n  - {name: keep, rate: 3/m}\n"
	mustWrite(t, filepath.Join(dir, "rl.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	mustWrite(t, path, base)
	td := startDaemonFile(t, path)

	mustWrite(t, filepath.Join(dir, "rl.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 10}\n")
	mustWrite(t, path, base+"  - {name: added, rate: 1/s}\n")
	if err := td.d.Reload(); err == nil {
		t.Fatal("Reload with a broken descriptor file: nil error, want a refusal")
	}
	if body := rulesInForce(t, td); strings.Contains(body, `"added"`) {
		t.Errorf("GET /v1/rules after the refused reload: %s, want rule keep only", body)
	}
	if r := get(t, td.api+"/v1/hotkeys"); r.status != http.StatusOK || strings.Contains(r.body, `"added"`) || !strings.Contains(r.body, `"keep"`) {
		t.Errorf("GET /v1/hotkeys after the refused reload: %d %s, want rule keep and no trace of added", r.status, r.body)
	}
	if r := get(t, td.api+"/metrics"); strings.Contains(r.body, `rule="added"`) || !strings.Contains(r.body, `rule="keep"`) {
		t.Errorf("GET /metrics after the refused reload: series of rule added (or none of keep):\n%s", grepLines(r.body, "sluice_decisions_total"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestReloadRetriedWhenDescriptorsFixed: a config change refused because a
// descriptor file it reads was broken is applied once that file is fixed:
// the fix must not be applied alone over the old config, leaving the
// config file's change refused until the next edit of it.
func TestReloadRetriedWhenDescriptorsFixed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	rl := filepath.Join(dir, "rl.yaml")
	const base = "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [rl.yaml]\nrules:\n  - {name: keep, rate: 3/m}\n"
	mustWrite(t, rl, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	mustWrite(t, path, base)
	td := startDaemonFile(t, path)

	// A deploy writes both files; the descriptor file is broken.
	mustWrite(t, rl, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 20}\n")
	replaceFile(t, path, base+"  - {name: added, rate: 1/s}\n")
	if err := td.d.Reload(); err == nil {
		t.Fatal("Reload with a broken descriptor file: nil error, want a refusal")
	}
	// The descriptor file is fixed; the config file is left as it is.
	replaceFile(t, rl, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 20}\n")
	for {
		if r := td.waitReload(); r.Err != nil {
			continue // an attempt still seeing the broken file
		}
		if strings.Contains(rulesInForce(t, td), `"added"`) {
			return
		}
	}
}
