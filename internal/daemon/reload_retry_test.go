package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRetryWaitsForWriter: a config change refused (here a typo) is tried
// again when the listeners' certificate files change, but not while the
// config file is being written in place: the retry used to read it as
// SIGHUP does, as it was, and a writer that had written only the first
// part of the fix (a valid config without the rules still to come) had
// that part applied as the whole until it finished.
func TestRetryWaitsForWriter(t *testing.T) {
	rd, ca, certFile, keyFile, _ := startRotatedFiles(t)
	conf := string(read(t, rd.path))
	replace(t, rd.path, []byte(strings.Replace(conf, "rate: 5/m", "rate: 5/x", 1)))
	if r := rd.waitReload(); r.Err == nil || !strings.Contains(r.Err.Error(), "5/x") {
		t.Fatalf("a config with rate 5/x: %v, want refused", r.Err)
	}

	// The fix, written in place by a writer that pauses half-way.
	f, err := os.OpenFile(rd.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.Replace(conf, "rate: 5/m", "rate: 7/m", 1)); err != nil {
		t.Fatal(err)
	}
	if r := rd.nextAttempt(); !r.Writing {
		t.Fatalf("the config file half-written and open: %+v, want the reload put off (Writing)", r)
	}
	// Meanwhile the certificate is renewed: its files change, and the
	// refused config is tried again.
	second := ca.Server(t)
	replace(t, keyFile, read(t, second.KeyFile))
	replace(t, certFile, read(t, second.CertFile))
	rd.waitServed(t, "the renewed certificate served", second)
	if got := rd.d.Config().Rules; len(got) != 1 || got[0].Rate != "5/m" {
		t.Fatalf("while the config file is being written, rule all's rate in force is %s (of %d rules); want the config in force (5/m), not the part written so far", got[0].Rate, len(got))
	}

	if _, err := f.WriteString("  - name: more\n    rate: 1/s\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for r := rd.waitReload(); r.Err != nil; r = rd.waitReload() {
		t.Errorf("reload: %v", r.Err)
	}
	if got := rd.d.Config().Rules; len(got) != 2 || got[0].Rate != "7/m" || got[1].Name != "more" {
		t.Errorf("once the writer closed the file, rules in force %+v; want all 7/m and more", got)
	}
}

// TestTokenRotatedWhileConfigWritten: a token rotated while the config
// file is being written in place is put in force once the writer has
// closed the file, with the whole config, even when the file is then what
// it was: the reload the token asked for is owed, not skipped as
// unchanged; and the part written so far is never applied. The token's
// reload used to read the file as SIGHUP does, as it was.
func TestTokenRotatedWhileConfigWritten(t *testing.T) {
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "first-token\n")
	whole := tokenConfig(token, "  - {name: keep, rate: 100/m}\n  - {name: other, rate: 1/s}\n")
	td := startDaemon(t, whole)
	head, rest, _ := strings.Cut(whole, "  - {name: other")
	rest = "  - {name: other" + rest

	f, err := os.OpenFile(td.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(head); err != nil {
		t.Fatal(err)
	}
	if r := td.nextAttempt(); !r.Writing {
		t.Fatalf("the config file half-written and open: %+v, want the reload put off (Writing)", r)
	}
	replaceFile(t, token, "second-token\n")
	if r := td.nextAttempt(); !r.Writing {
		t.Fatalf("the token rotated while the config file is being written: %+v, want the reload put off (Writing)", r)
	}
	if got := checkWith(t, td, "first-token"); got != http.StatusOK {
		t.Errorf("while the config file is being written, the token in force: %d, want 200 (the first token)", got)
	}
	if body := rulesWith(t, td, "first-token"); !strings.Contains(body, `"other"`) {
		t.Errorf("while the config file is being written, rules in force: %s; want keep and other", body)
	}

	if _, err := f.WriteString(rest); err != nil { // the file is again what it was
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload once the writer closed the file: %v", r.Err)
	}
	if got := checkWith(t, td, "second-token"); got != http.StatusOK {
		t.Errorf("with the rotated token: %d, want 200", got)
	}
	if body := rulesWith(t, td, "second-token"); !strings.Contains(body, `"other"`) {
		t.Errorf("rules in force: %s; want keep and other", body)
	}
}

// TestRefusedNotRetriedForOtherFiles: a refused config is tried again when
// a file it names (here the certificate's) changes, not on every event in
// that file's directory: a directory shared with other files (the config
// itself, an editor's swap files, a log) had the same refusal logged and
// counted in sluice_config_reloads_total{result="failure"} again at each.
func TestRefusedNotRetriedForOtherFiles(t *testing.T) {
	rd, _, certFile, _, _ := startRotatedFiles(t)
	conf := string(read(t, rd.path))
	replace(t, rd.path, []byte(strings.Replace(conf, "rate: 5/m", "rate: 5/x", 1)))
	if r := rd.waitReload(); r.Err == nil {
		t.Fatal("a config with rate 5/x applied, want refused")
	}
	failures := func() float64 { return rd.metric("sluice_config_reloads_total", "result", "failure") }
	if got := failures(); got != 1 {
		t.Fatalf("failures counted after one refusal: %v, want 1", got)
	}
	mustWrite(t, filepath.Join(filepath.Dir(certFile), "notes.txt"), "not a certificate\n")
	waitFor(t, "the event in the certificates' directory followed", func() bool {
		return failures() > 1 || strings.Contains(rd.logs.String(), "not tried again")
	})
	if got := failures(); got != 1 {
		t.Errorf("failures counted after a file beside the certificate was written: %v, want 1 (the refusal, once)", got)
	}
	if n := strings.Count(rd.logs.String(), "config reload refused"); n != 1 {
		t.Errorf("the refusal logged %d times, want once", n)
	}
}

// TestTokenRotatedWhileConfigMissing: a token rotated while the config
// file is missing (a tool that deletes it before writing it again) is put
// in force when the file is back, even as it was: the reload the token
// asked for is owed, not skipped as unchanged.
func TestTokenRotatedWhileConfigMissing(t *testing.T) {
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "first-token\n")
	whole := tokenConfig(token, "  - {name: keep, rate: 100/m}\n")
	td := startDaemon(t, whole)
	if err := os.Remove(td.path); err != nil {
		t.Fatal(err)
	}
	if r := td.nextLook(); !r.Missing {
		t.Fatalf("the config file removed: %+v, want it waited for (Missing)", r)
	}
	replaceFile(t, token, "second-token\n")
	if r := td.nextLook(); !r.Missing {
		t.Fatalf("the token rotated while the config file is missing: %+v, want the reload to wait for it (Missing)", r)
	}
	mustWrite(t, td.path, whole)
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload once the config file is back: %v", r.Err)
	}
	if got := checkWith(t, td, "second-token"); got != http.StatusOK {
		t.Errorf("with the rotated token: %d, want 200", got)
	}
}

// TestConfigReloadWaitsForNamedWriter: a config change that comes while a
// file it names (here a descriptor file) is being written in place waits
// for that writer as well: the reload reads the descriptor files, and
// used to apply the part written so far as the whole domain, with the new
// config, until the writer closed the file. Once it has, the two apply.
func TestConfigReloadWaitsForNamedWriter(t *testing.T) {
	const (
		head = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
		k2   = "  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
		conf = "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [rl/d.yaml]\nrules:\n  - {name: keep, rate: %s}\n"
	)
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "rl"))
	file := filepath.Join(dir, "rl", "d.yaml")
	mustWrite(t, file, head+k2)
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, fmt.Sprintf(conf, "3/m"))
	td := startDaemonFile(t, path)

	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(head); err != nil {
		t.Fatal(err)
	}
	if r := td.nextAttempt(); !r.Writing {
		t.Fatalf("descriptor file half-written and open: %+v, want its reload put off (Writing)", r)
	}
	replaceFile(t, path, fmt.Sprintf(conf, "5/m"))
	for {
		r := td.nextAttempt()
		if !r.Writing {
			t.Fatalf("config change while a descriptor file is being written: %+v, want it put off (Writing)", r)
		}
		if strings.Contains(td.logs.String(), "a file the config names is being written in place") {
			break
		}
	}
	if got, rate := td.d.descriptorSet().Rules(), td.d.Config().Rules[0].Rate; got != 2 || rate != "3/m" {
		t.Fatalf("while the descriptor file is being written: %d limits and rate %s in force, want the 2 and 3/m of before", got, rate)
	}

	if _, err := f.WriteString(k2); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the config change applied once the descriptor file is whole", func() bool {
		return td.d.Config().Rules[0].Rate == "5/m"
	})
	if got := td.d.descriptorSet().Rules(); got != 2 {
		t.Errorf("limits in force with the new config: %d, want 2", got)
	}
}

// TestDescriptorFileMissingWaited: a descriptor file that grpc.config
// names, missing when its watcher looks (a tool that deletes it before
// writing it again, a ConfigMap's ..data swap to a version without it),
// is waited for as the config file is: nothing refused or counted, one
// warning, the descriptors in force stay, and the file is read when it is
// back. It was refused, logged as an error and counted as a failure.
func TestDescriptorFileMissingWaited(t *testing.T) {
	const (
		head = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
		k2   = "  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	)
	dir := t.TempDir()
	file := filepath.Join(dir, "d.yaml")
	mustWrite(t, file, head)
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [d.yaml]\nrules:\n  - {name: keep, rate: 3/m}\n")
	td := startDaemonFile(t, path)

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if r := td.nextLook(); !r.Missing {
		t.Fatalf("descriptor file removed: %+v, want it waited for (Missing)", r)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("failures counted while the descriptor file is missing: %v, want 0", got)
	}
	if got := td.d.descriptorSet().Rules(); got != 1 {
		t.Errorf("limits in force while the descriptor file is missing: %d, want the 1 of before", got)
	}
	if n := strings.Count(td.logs.String(), "descriptor file is missing"); n != 1 {
		t.Errorf("the missing descriptor file logged %d times, want once", n)
	}
	mustWrite(t, file, head+k2)
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("descriptor reload once the file is back: %v", r.Err)
	}
	if got := td.d.descriptorSet().Rules(); got != 2 {
		t.Errorf("limits in force once the file is back: %d, want 2", got)
	}
}

// TestTokenAndCertMissingWaited: api.token_file and a tls: file missing
// when their watcher looks (deleted before being written again, a Secret's
// ..data swap to a version without them) are waited for as the config
// file is: one warning each, nothing refused or counted, the token and
// certificate in force stay, and the files are read when they are back.
// The token's went to a reload refused and counted as a failure, the
// certificate's to an error line.
func TestTokenAndCertMissingWaited(t *testing.T) {
	rd, ca, certFile, keyFile, _ := startRotatedFiles(t)
	if err := os.Remove(certFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the missing certificate file seen", func() bool {
		l := rd.logs.String()
		return strings.Contains(l, "certificate file is missing") || strings.Contains(l, "certificate files not reloaded")
	})
	if l := rd.logs.String(); strings.Contains(l, "certificate files not reloaded") || strings.Count(l, "certificate file is missing") != 1 {
		t.Errorf("a missing certificate file: want one warning that it is missing, no error:\n%s", l)
	}
	second := ca.Server(t)
	replace(t, keyFile, read(t, second.KeyFile))
	mustWrite(t, certFile, string(read(t, second.CertFile)))
	rd.waitServed(t, "the certificate back, renewed", second)

	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "first-token\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100/m}\n"))
	if err := os.Remove(token); err != nil {
		t.Fatal(err)
	}
	failures := func() float64 { return td.metric("sluice_config_reloads_total", "result", "failure") }
	waitFor(t, "the missing token file seen", func() bool {
		return failures() > 0 || strings.Contains(td.logs.String(), "a file the config names is missing")
	})
	if got := failures(); got != 0 {
		t.Errorf("failures counted with the token file missing: %v, want 0", got)
	}
	if got := checkWith(t, td, "first-token"); got != http.StatusOK {
		t.Errorf("the token in force while its file is missing: %d, want 200", got)
	}
	mustWrite(t, token, "second-token\n")
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload once the token file is back: %v", r.Err)
	}
	if got := checkWith(t, td, "second-token"); got != http.StatusOK {
		t.Errorf("with the token back, rotated: %d, want 200", got)
	}
}
