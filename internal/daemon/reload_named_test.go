package daemon

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lookUntil reads reload attempts until said holds of the logs after one,
// failing on an attempt that applied or refused the config, and when
// none comes within 10 s: a change waited for in silence.
func (td *testDaemon) lookUntil(what string, said func(logs string) bool) {
	td.t.Helper()
	for !said(td.logs.String()) {
		select {
		case r := <-td.reloads:
			if !r.Missing && !r.Writing && !r.Unchanged {
				td.t.Fatalf("%s: reload attempt %+v, want it waited for (Missing)", what, r)
			}
		case <-time.After(10 * time.Second):
			td.t.Fatalf("%s: nothing said within 10s", what)
		}
	}
}

// TestConfigEditedWhileNamedFileMissing: while a file the config names is
// missing (api.token_file here), a reload waits for it. An edit made to
// the config meanwhile is not waited for in silence: one that still names
// the file is said to wait, once for each new content; one that names it
// no more does not wait for it, and is applied (here refused, and the
// refusal says why: api.token_file needs a restart); and the edit waiting
// when the file is back is applied then.
func TestConfigEditedWhileNamedFileMissing(t *testing.T) {
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "first-token\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100/m}\n"))
	const missing, edited = "a file the config names is missing", "config changed while a file it names is missing"
	mustRemove(t, token)
	td.lookUntil("the token file removed", func(l string) bool { return strings.Count(l, missing) == 1 })

	replaceFile(t, td.path, tokenConfig(token, "  - {name: keep, rate: 200/m}\n"))
	td.lookUntil("an edit that still names the token file", func(l string) bool { return strings.Count(l, edited) == 1 })
	replaceFile(t, td.path, tokenConfig(token, "  - {name: keep, rate: 250/m}\n"))
	td.lookUntil("a second edit that still names it", func(l string) bool { return strings.Count(l, edited) == 2 })

	replaceFile(t, td.path, "listen: 127.0.0.1:0\nrules:\n  - {name: keep, rate: 200/m}\n")
	r := td.nextLook()
	for r.Missing {
		r = td.nextLook()
	}
	if r.Err == nil || !strings.Contains(r.Err.Error(), "api.token_file") || !strings.Contains(r.Err.Error(), "restart") {
		t.Fatalf("an edit that names the missing token file no more: %+v, want refused: api.token_file needs a restart", r)
	}

	// Named again: a new wait, said as the first.
	replaceFile(t, td.path, tokenConfig(token, "  - {name: keep, rate: 300/m}\n"))
	td.lookUntil("an edit naming the token file again", func(l string) bool { return strings.Count(l, missing) == 2 })
	if got := td.d.Config().Rules[0].Rate; got != "100/m" {
		t.Errorf("rate in force while the token file is missing: %s, want 100/m", got)
	}
	replaceFile(t, token, "second-token\n")
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("the token file back: %v, want the edit applied", r.Err)
	}
	if got := td.d.Config().Rules[0].Rate; got != "300/m" {
		t.Errorf("rate in force once the token file is back: %s, want 300/m", got)
	}
	if got := checkWith(t, td, "second-token"); got != http.StatusOK {
		t.Errorf("the token back, rotated: %d, want 200", got)
	}
	if n := strings.Count(td.logs.String(), edited); n != 2 {
		t.Errorf("%d lines say the config changed while the file is missing, want 2 (one per edit)", n)
	}
}

// TestConfigEditedWhileDescriptorFileMissing: as
// TestConfigEditedWhileNamedFileMissing, for a descriptor file that
// grpc.config names: edits made while it is missing wait for it, each
// said to, and the last is applied with it once it is back.
func TestConfigEditedWhileDescriptorFileMissing(t *testing.T) {
	const desc = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	config := func(rate string) string {
		return "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [d.yaml]\nrules:\n  - {name: keep, rate: " + rate + "}\n"
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "d.yaml")
	mustWrite(t, file, desc)
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, config("3/m"))
	td := startDaemonFile(t, path)
	const missing, edited = "a file the config names is missing", "config changed while a file it names is missing"
	mustRemove(t, file)
	td.lookUntil("the descriptor file removed", func(l string) bool { return strings.Contains(l, "descriptor file is missing") })

	replaceFile(t, path, config("5/m"))
	td.lookUntil("an edit that still names the descriptor file", func(l string) bool { return strings.Count(l, missing) == 1 })
	replaceFile(t, path, config("6/m"))
	td.lookUntil("a second edit", func(l string) bool { return strings.Count(l, edited) == 1 })
	if got := td.d.Config().Rules[0].Rate; got != "3/m" {
		t.Errorf("rate in force while the descriptor file is missing: %s, want 3/m", got)
	}
	mustWrite(t, file, desc)
	for td.d.Config().Rules[0].Rate != "6/m" {
		if r := td.nextLook(); r.Err != nil {
			t.Fatalf("the descriptor file back: %v, want the edit applied", r.Err)
		}
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("failures counted: %v, want 0", got)
	}
}

// TestNamedFileBackWaitsForItsCreator: a file the config names, missing,
// comes back by a writer that creates it and pauses before its first
// write (a slow copy): the file is there and empty, and no write has been
// seen, since it was not watched before it existed. The reload waits for
// its creator to close it, as for a file written in place, rather than
// read it empty and refuse the config.
func TestNamedFileBackWaitsForItsCreator(t *testing.T) {
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "first-token\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100/m}\n"))
	mustRemove(t, token)
	td.lookUntil("the token file removed", func(l string) bool { return strings.Contains(l, "a file the config names is missing") })
	replaceFile(t, td.path, tokenConfig(token, "  - {name: keep, rate: 200/m}\n"))
	td.lookUntil("an edit while it is missing", func(l string) bool {
		return strings.Contains(l, "config changed while a file it names is missing")
	})

	f, err := os.Create(token)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The daemon sees the file appear, empty, and takes it as being
	// written; nothing is read of it meanwhile.
	for deadline := time.Now().Add(10 * time.Second); !td.d.namedWriting(); {
		select {
		case r := <-td.reloads:
			if r.Err != nil {
				t.Fatalf("the token file created, empty, its creator yet to write: %v, want the reload to wait for it", r.Err)
			}
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the token file created and held open: not taken as being written within 10s")
		}
	}
	if _, err := f.WriteString("second-token\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("the token file written and closed: %v, want the edit applied", r.Err)
	}
	if got := td.d.Config().Rules[0].Rate; got != "200/m" {
		t.Errorf("rate in force: %s, want 200/m", got)
	}
	if got := checkWith(t, td, "second-token"); got != http.StatusOK {
		t.Errorf("the new token: %d, want 200", got)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("failures counted: %v, want 0 (the empty file was read)", got)
	}
}
