package daemon

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// setFireHook sets fireHook for the test, and clears it after. The hook
// is the whole process's: t must not be parallel (t.Setenv refuses a
// parallel test).
func setFireHook(t *testing.T, hook func(cw *configWatcher)) {
	t.Setenv("SLUICE_TEST_PACKAGE_HOOKS", t.Name())
	fireHook = hook
	t.Cleanup(func() { fireHook = nil })
}

// Two descriptors; the first half of it is no YAML (cut in a mapping).
const (
	twoDescs = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n" +
		"  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 20}\n"
	twoDescsHalf = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: sec"
)

// descDaemon runs a daemon whose grpc.config names the descriptor file
// d.yaml, beside the config file, holding twoDescs. It returns the daemon
// and the descriptor file's path.
func descDaemon(t *testing.T) (*testDaemon, string) {
	dir := t.TempDir()
	file := filepath.Join(dir, "d.yaml")
	mustWrite(t, file, twoDescs)
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [d.yaml]\nrules:\n  - {name: keep, rate: 3/m}\n")
	return startDaemonFile(t, path), file
}

// heldReload holds, once armed, the first reload that at picks (a
// watcher's reload that found a file missing, and so not being written)
// between that finding and its read of the files, until released: a
// writer then creates the file in between.
type heldReload struct {
	arm, blocked, release chan struct{}
	once                  sync.Once
}

// holdReload sets fireHook (see setFireHook) to hold the reload at picks.
// at runs on the watchers' goroutines once armed: what it reads must be
// set before the test arms it.
func holdReload(t *testing.T, at func(cw *configWatcher) bool) *heldReload {
	h := &heldReload{arm: make(chan struct{}), blocked: make(chan struct{}), release: make(chan struct{})}
	setFireHook(t, func(cw *configWatcher) {
		select {
		case <-h.arm:
		default:
			return
		}
		if at(cw) {
			h.once.Do(func() {
				close(h.blocked) // found not being written: the reload reads next
				<-h.release
			})
		}
	})
	return h
}

// writeHalf creates path and writes half into it; the writer then pauses
// with the file open (closed at the test's end if writeRest does not).
func writeHalf(t *testing.T, path, half string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString(half); err != nil {
		t.Fatal(err)
	}
	return f
}

// writeRest writes rest into f and closes it: its writer is done.
func writeRest(t *testing.T, f *os.File, rest string) {
	t.Helper()
	if _, err := f.WriteString(rest); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// appliedWithoutFailure reads reload attempts until applied holds,
// failing on one refused, and then checks that no reload failure was
// counted: the half written file was never read.
func (td *testDaemon) appliedWithoutFailure(what string, applied func() bool) {
	td.t.Helper()
	for !applied() {
		if r := td.nextLook(); r.Err != nil {
			td.t.Fatalf("%s: %v, want it applied", what, r.Err)
		}
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		td.t.Errorf("%s: %v failures counted, want 0 (the half was read)", what, got)
	}
}

// putOffUntilWriting reads reload attempts until one is put off while a
// file is being written, failing on one that applied or refused
// something before: a file half written was read.
func (td *testDaemon) putOffUntilWriting(what string) {
	td.t.Helper()
	for {
		select {
		case r := <-td.reloads:
			if r.Writing {
				return
			}
			if !r.Missing && !r.Unchanged {
				td.t.Fatalf("%s: reload attempt %+v, want it put off", what, r)
			}
		case <-time.After(10 * time.Second):
			td.t.Fatalf("%s: no reload put off within 10s", what)
		}
	}
}

// TestDescriptorFileBackWhileReloadBegins: the descriptor file, missing,
// is created again by a writer that writes half of it and pauses, just
// after a reload of the descriptors found it missing and so not being
// written, and before that reload reads it. The reload does not read the
// half: it waits for the writer to close the file, and then applies the
// whole of it. Nothing is refused or counted as a failure.
func TestDescriptorFileBackWhileReloadBegins(t *testing.T) {
	// The hook is set before the daemon runs, and reads td, file once
	// armed, after they are set.
	var (
		td   *testDaemon
		file string
	)
	h := holdReload(t, func(cw *configWatcher) bool { return cw == td.d.descWatcher && missing(file) })
	td, file = descDaemon(t)
	mustRemove(t, file)
	td.lookUntil("the descriptor file removed", func(l string) bool { return strings.Contains(l, "descriptor file is missing") })
	close(h.arm)
	mustWrite(t, filepath.Join(filepath.Dir(file), "other"), "x") // an event in its directory: a reload
	<-h.blocked

	f := writeHalf(t, file, twoDescsHalf)
	close(h.release)
	// The reload is put off; none reads the half before the writer is done.
	td.putOffUntilWriting("the file back, half written, its writer at work")
	writeRest(t, f, twoDescs[len(twoDescsHalf):])
	td.appliedWithoutFailure("the descriptor file written and closed", func() bool { return td.d.cur.Load().descs.Rules() == 2 })
}

// TestDescriptorFileRenamedInWhileWritten: a descriptor file put in place
// by a rename while its writer still holds it open, half written, is a
// file that appeared with its first bytes in, and no write seen of it:
// the reload waits for its writer to close it, and applies the whole. A
// file renamed in whole, open for writing by no one, is applied at once,
// and not waited for.
func TestDescriptorFileRenamedInWhileWritten(t *testing.T) {
	td, file := descDaemon(t)
	const one = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	replaceFile(t, file, one)
	if r := td.waitReload(); r.Err != nil || td.d.cur.Load().descs.Rules() != 1 {
		t.Fatalf("a descriptor file renamed in whole: %+v, %d rules, want it applied (1 rule)", r, td.d.cur.Load().descs.Rules())
	}
	if strings.Contains(td.logs.String(), "being written") {
		t.Fatal("a descriptor file renamed in whole was taken as being written")
	}

	tmp := filepath.Join(filepath.Dir(file), ".d.yaml.part")
	f := writeHalf(t, tmp, twoDescsHalf)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	td.putOffUntilWriting("a descriptor file renamed in half written, its writer at work")
	writeRest(t, f, twoDescs[len(twoDescsHalf):])
	td.appliedWithoutFailure("the descriptor file written and closed", func() bool { return td.d.cur.Load().descs.Rules() == 2 })
}

// TestConfigFileBackWhileReloadBegins: as
// TestDescriptorFileBackWhileReloadBegins, for the config file itself:
// created again by a writer that writes its first rule and pauses, after
// a reload found it missing and before that reload reads it. The first
// rule alone is a valid config, and wrong: the reload waits for the
// writer to close the file, and applies both rules.
func TestConfigFileBackWhileReloadBegins(t *testing.T) {
	const half = "listen: 127.0.0.1:0\nrules:\n  - {name: one, rate: 5/m}\n"
	const whole = half + "  - {name: two, rate: 7/m}\n"
	var td *testDaemon // read by the hook once armed, after it is set
	h := holdReload(t, func(cw *configWatcher) bool { return cw == td.d.watcher && missing(td.path) })
	td = startDaemon(t, whole)
	mustRemove(t, td.path)
	td.lookUntil("the config file removed", func(l string) bool { return strings.Contains(l, "config file is missing") })
	close(h.arm)
	mustWrite(t, filepath.Join(filepath.Dir(td.path), "other"), "x") // an event in its directory: a reload
	<-h.blocked

	f := writeHalf(t, td.path, half)
	close(h.release)
	td.putOffUntilWriting("the config file back, half written, its writer at work")
	writeRest(t, f, whole[len(half):])
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("the config file written and closed: %v, want it applied", r.Err)
	}
	if got := len(td.d.Config().Rules); got != 2 {
		t.Errorf("rules in force: %d, want 2 (the whole file)", got)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("failures counted: %v, want 0", got)
	}
}

// TestCertFileBackWhileReloadBegins: as
// TestDescriptorFileBackWhileReloadBegins, for a listener's certificate:
// created again by a writer that writes half of it and pauses, after the
// certificate watcher found it missing and before the listeners read it.
// It is not read half written (logged as not reloaded): the new
// certificate is served once its writer has closed it.
func TestCertFileBackWhileReloadBegins(t *testing.T) {
	var ( // read by the hook once armed, after they are set
		rd       *rotateDaemon
		certFile string
	)
	h := holdReload(t, func(cw *configWatcher) bool { return cw == rd.d.certWatcher && missing(certFile) })
	rd, ca, certFile, keyFile, first := startRotatedFiles(t)
	rd.waitServed(t, "the first certificate served", first)
	refused := func() int {
		return strings.Count(rd.logs.String(), "certificate files not reloaded")
	}
	before := refused()

	second := ca.Server(t)
	mustRemove(t, certFile)
	waitFor(t, "the certificate file removed", func() bool { return strings.Contains(rd.logs.String(), "certificate file is missing") })
	close(h.arm)
	replace(t, keyFile, read(t, second.KeyFile)) // an event in its directory: a reload
	<-h.blocked

	pem := string(read(t, second.CertFile))
	f := writeHalf(t, certFile, pem[:len(pem)/2])
	close(h.release)
	waitFor(t, "the certificate back, half written: the reload put off", func() bool {
		return strings.Contains(rd.logs.String(), "certificate file is being written in place") || refused() > before
	})
	if refused() > before {
		t.Fatalf("the certificate back, half written, its writer at work: read and refused, want it waited for:\n%s", rd.logs.String())
	}
	writeRest(t, f, pem[len(pem)/2:])
	rd.waitServed(t, "the certificate written and closed", second)
	if refused() > before {
		t.Errorf("the half written certificate was read (logged as not reloaded):\n%s", rd.logs.String())
	}
}

// TestTokenRenamedInWhileWritten: api.token_file replaced by a rename
// while its writer still holds the new file open with the first part of
// the token in (a valid token, and the wrong one): the token is not put
// in force until the writer has closed the file; then the whole is.
func TestTokenRenamedInWhileWritten(t *testing.T) {
	token := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, token, "first-token\n")
	td := startDaemon(t, tokenConfig(token, "  - {name: keep, rate: 100/m}\n"))
	tmp := token + ".part"
	f := writeHalf(t, tmp, "second")
	if err := os.Rename(tmp, token); err != nil {
		t.Fatal(err)
	}
	// Taken as being written, and nothing applied meanwhile.
	for deadline := time.Now().Add(10 * time.Second); !td.d.namedWriting(); {
		select {
		case r := <-td.reloads:
			if !r.Missing && !r.Writing && !r.Unchanged {
				t.Fatalf("the token file renamed in, half written, its writer at work: reload %+v, want it waited for", r)
			}
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the token file renamed in, held open: not taken as being written within 10s")
		}
	}
	if got := checkWith(t, td, "second"); got == http.StatusOK {
		t.Fatal("the first part of the token, its writer at work, was put in force")
	}
	writeRest(t, f, "-token\n")
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("the token file written and closed: %v, want the token put in force", r.Err)
	}
	if got := checkWith(t, td, "second-token"); got != http.StatusOK {
		t.Errorf("the whole new token: %d, want 200", got)
	}
}
