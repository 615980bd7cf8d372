package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nextLook returns the next reload attempt that found the file missing,
// applied it or refused it (waitReload skips those that found it missing).
func (td *testDaemon) nextLook() ReloadResult {
	td.t.Helper()
	for {
		select {
		case r := <-td.reloads:
			if r.Writing || r.Unchanged {
				continue
			}
			return r
		case <-time.After(10 * time.Second):
			td.t.Fatal("no reload attempt within 10s")
			return ReloadResult{}
		}
	}
}

// assertMissingWaited checks what a daemon whose config file has gone
// missing after an event did about it: nothing refused, nothing counted,
// one warning, and the old rules serving.
func assertMissingWaited(t *testing.T, td *testDaemon, r ReloadResult, remaining int) {
	t.Helper()
	if r.Err != nil || !r.Missing {
		t.Errorf("reload attempt with the file missing: %+v, want Missing and no error", r)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("sluice_config_reloads_total{result=failure} = %v with the file missing, want 0", got)
	}
	logs := td.logs.String()
	if lines := grepLines(logs, "level=ERROR"); lines != "" {
		t.Errorf("error lines with the file missing:\n%s", lines)
	}
	if n := strings.Count(logs, "config file is missing"); n != 1 {
		t.Errorf("%d lines say the config file is missing, want 1:\n%s", n, logs)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed || a.Limit != 3 || a.Remaining != int64(remaining) {
		t.Errorf("keep with the file missing: %+v, want the old rule (limit 3, remaining %d)", a, remaining)
	}
}

// TestHotReloadFileMissing: a config file removed and written again (a
// tool that deletes it before writing it) is missing for a moment; a
// reload that looks then waits for it to be back, refusing and counting
// nothing, and the old config serves until the new one is read.
func TestHotReloadFileMissing(t *testing.T) {
	td := startDaemon(t, reloadBase)
	if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed {
		t.Fatalf("keep: %+v, want allowed", a)
	}
	mustRemove(t, td.path)
	assertMissingWaited(t, td, td.nextLook(), 1)

	// Another event while it is missing: looked at again, said once.
	mustWrite(t, filepath.Join(filepath.Dir(td.path), "other"), "x")
	assertMissingWaited(t, td, td.nextLook(), 0)

	// Back, whole (a file made again and written in place may be read
	// before its first write: see the README on in-place writes).
	replaceFile(t, td.path, strings.Replace(reloadBase, "3/m", "5/m", 1))
	if r := td.waitReload(); r.Err != nil || r.Missing {
		t.Fatalf("the file back: %+v, want applied", r)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed || a.Limit != 5 {
		t.Errorf("keep after the file came back with 5/m: %+v, want limit 5", a)
	}
	if s, f := td.metric("sluice_config_reloads_total", "result", "success"), td.metric("sluice_config_reloads_total", "result", "failure"); s != 1 || f != 0 {
		t.Errorf("sluice_config_reloads_total success %v failure %v, want 1 and 0", s, f)
	}

	// Missing again: said again, once.
	mustRemove(t, td.path)
	if r := td.nextLook(); r.Err != nil || !r.Missing {
		t.Errorf("reload attempt with the file missing again: %+v, want Missing", r)
	}
	if n := strings.Count(td.logs.String(), "config file is missing"); n != 2 {
		t.Errorf("%d lines say the config file is missing after it went twice, want 2", n)
	}
	// SIGHUP asks for the file as it is: a missing one is refused.
	if err := td.d.Reload(); err == nil {
		t.Error("Reload with the file missing: nil error, want a refusal")
	}
}

// TestHotReloadSymlinkSwapMissing mounts the config as Kubernetes does a
// ConfigMap and swaps ..data to a version without the file (its key
// taken out of the ConfigMap), then to one with it again.
func TestHotReloadSymlinkSwapMissing(t *testing.T) {
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "..v1"))
	mustWrite(t, filepath.Join(dir, "..v1", "sluice.yaml"), reloadBase)
	mustSymlink(t, "..v1", filepath.Join(dir, "..data"))
	path := filepath.Join(dir, "sluice.yaml")
	mustSymlink(t, filepath.Join("..data", "sluice.yaml"), path)
	td := startDaemonFile(t, path)
	if a, _ := check(t, td.api, "keep", "k", 1); !a.Allowed {
		t.Fatalf("keep: %+v, want allowed", a)
	}

	swap := func(version string) {
		t.Helper()
		mustSymlink(t, version, filepath.Join(dir, "..data_tmp"))
		mustRename(t, filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data"))
	}
	mustMkdir(t, filepath.Join(dir, "..v2"))
	mustWrite(t, filepath.Join(dir, "..v2", "other.yaml"), "x")
	swap("..v2")
	assertMissingWaited(t, td, td.nextLook(), 1)

	mustMkdir(t, filepath.Join(dir, "..v3"))
	mustWrite(t, filepath.Join(dir, "..v3", "sluice.yaml"), strings.Replace(reloadBase, "name: keep", "name: swapped", 1))
	swap("..v3")
	if r := td.waitReload(); r.Err != nil || r.Missing {
		t.Fatalf("swap to a version with the file: %+v, want applied", r)
	}
	if body := rulesInForce(t, td); !strings.Contains(body, `"swapped"`) {
		t.Errorf("GET /v1/rules after the swap: %s, want rule swapped", body)
	}
	if f := td.metric("sluice_config_reloads_total", "result", "failure"); f != 0 {
		t.Errorf("sluice_config_reloads_total{result=failure} = %v, want 0", f)
	}
}

// TestHotReloadFileMissingThenEmpty: a config file deleted and made again
// by a writer that has not written yet (a slow generator: rm f; gen > f)
// is back but empty, a config no one means (an empty config is refused);
// its writes, once they come, are watched as those of any file written
// in place. So an empty file where the last look found none is waited
// for like a missing one, and the whole file is read once its writer
// closes it.
func TestHotReloadFileMissingThenEmpty(t *testing.T) {
	td := startDaemon(t, reloadBase)
	mustRemove(t, td.path)
	if r := td.nextLook(); !r.Missing {
		t.Fatalf("reload attempt with the file missing: %+v, want Missing", r)
	}
	f, err := os.Create(td.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Waited for: as missing (the empty file read), or as being written
	// (its creation seen before the look, the file watched since).
	if r := td.nextAttempt(); r.Err != nil || !(r.Missing || r.Writing) {
		t.Errorf("reload attempt with the file back but empty, its writer at work: %+v, want Missing or Writing", r)
	}
	if _, err := f.WriteString(strings.Replace(reloadBase, "3/m", "5/m", 1)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("the file written and closed: %+v, want applied", r)
	}
	if a, _ := check(t, td.api, "keep", "k", 1); a.Limit != 5 {
		t.Errorf("keep after the file was written: %+v, want limit 5", a)
	}
	if f := td.metric("sluice_config_reloads_total", "result", "failure"); f != 0 {
		t.Errorf("sluice_config_reloads_total{result=failure} = %v, want 0", f)
	}
	if n := strings.Count(td.logs.String(), "config file is missing"); n != 1 {
		t.Errorf("%d lines say the config file is missing, want 1", n)
	}
}
