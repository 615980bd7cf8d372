package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// descDirDaemon runs a daemon whose grpc.config names the directory
// descs, beside the config file, holding a.yaml with one descriptor of
// domain a. It returns the daemon and the directory's path.
func descDirDaemon(t *testing.T) (*testDaemon, string) {
	dir := t.TempDir()
	descs := filepath.Join(dir, "descs")
	mustMkdir(t, descs)
	mustWrite(t, filepath.Join(descs, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [descs]\nrules:\n  - {name: keep, rate: 3/m}\n")
	return startDaemonFile(t, path), descs
}

// TestDescriptorDirFileCreatedWhileReloadBegins: a descriptor file
// created in a watched directory of them, just after a reload of the
// descriptors found none being written and before it reads them, and
// written half when it reads: the reload waits for its writer to close
// it, and then applies the whole of it.
func TestDescriptorDirFileCreatedWhileReloadBegins(t *testing.T) {
	var ( // read by the hook once armed, after they are set
		td   *testDaemon
		file string
	)
	arm, blocked, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	setFireHook(t, func(cw *configWatcher) {
		select {
		case <-arm:
		default:
			return
		}
		if cw == td.d.descWatcher && missing(file) {
			once.Do(func() {
				close(blocked) // found none being written: the reload reads next
				<-release
			})
		}
	})
	td, descs := descDirDaemon(t)
	file = filepath.Join(descs, "d.yaml")
	close(arm)
	mustWrite(t, filepath.Join(descs, "notes.txt"), "x") // an event in the directory: a reload
	<-blocked

	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(twoDescsHalf); err != nil {
		t.Fatal(err)
	}
	close(release)
	td.putOffUntilWriting("a descriptor file created in the directory, half written, its writer at work")
	if _, err := f.WriteString(twoDescs[len(twoDescsHalf):]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for !td.d.cur.Load().descs.HasDomain("d") || td.d.cur.Load().descs.Rules() != 3 {
		if r := td.nextLook(); r.Err != nil {
			t.Fatalf("the descriptor file written and closed: %v, want it applied", r.Err)
		}
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("failures counted: %v, want 0 (the half was read)", got)
	}
}

// TestDescriptorDirRenamedInWhileWritten: a directory of descriptor files
// put in place by a rename while a file in it is still being written
// (held open, half written) is a directory that appeared, its files met
// for the first time and no write seen of them: the reload waits for the
// writer to close it, and applies the whole.
func TestDescriptorDirRenamedInWhileWritten(t *testing.T) {
	td, descs := descDirDaemon(t)
	next := filepath.Join(filepath.Dir(descs), "descs.next")
	mustMkdir(t, next)
	mustWrite(t, filepath.Join(next, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	f, err := os.Create(filepath.Join(next, "d.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(twoDescsHalf); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(filepath.Dir(descs), "descs.old")
	if err := os.Rename(descs, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, descs); err != nil {
		t.Fatal(err)
	}
	td.putOffUntilWriting("a directory renamed in with a file half written, its writer at work")
	if _, err := f.WriteString(twoDescs[len(twoDescsHalf):]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for !td.d.cur.Load().descs.HasDomain("d") {
		if r := td.nextLook(); r.Err != nil {
			t.Fatalf("the descriptor file written and closed: %v, want it applied", r.Err)
		}
	}
	if got := td.d.cur.Load().descs.Rules(); got != 3 {
		t.Errorf("rules in force: %d, want 3 (a's one, d's two)", got)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "failure"); got != 0 {
		t.Errorf("failures counted: %v, want 0 (the half was read)", got)
	}
	if strings.Contains(td.logs.String(), "descriptor reload refused") {
		t.Errorf("a descriptor reload was refused:\n%s", td.logs.String())
	}
}
