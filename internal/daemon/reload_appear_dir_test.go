package daemon

import (
	"os"
	"path/filepath"
	"strings"
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
	h := holdReload(t, func(cw *configWatcher) bool { return cw == td.d.descWatcher && missing(file) })
	td, descs := descDirDaemon(t)
	file = filepath.Join(descs, "d.yaml")
	close(h.arm)
	mustWrite(t, filepath.Join(descs, "notes.txt"), "x") // an event in the directory: a reload
	<-h.blocked

	f := writeHalf(t, file, twoDescsHalf)
	close(h.release)
	td.putOffUntilWriting("a descriptor file created in the directory, half written, its writer at work")
	writeRest(t, f, twoDescs[len(twoDescsHalf):])
	td.appliedWithoutFailure("the descriptor file written and closed", func() bool {
		return td.d.cur.Load().descs.HasDomain("d") && td.d.cur.Load().descs.Rules() == 3
	})
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
	f := writeHalf(t, filepath.Join(next, "d.yaml"), twoDescsHalf)
	old := filepath.Join(filepath.Dir(descs), "descs.old")
	if err := os.Rename(descs, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, descs); err != nil {
		t.Fatal(err)
	}
	td.putOffUntilWriting("a directory renamed in with a file half written, its writer at work")
	writeRest(t, f, twoDescs[len(twoDescsHalf):])
	td.appliedWithoutFailure("the descriptor file written and closed", func() bool { return td.d.cur.Load().descs.HasDomain("d") })
	if got := td.d.cur.Load().descs.Rules(); got != 3 {
		t.Errorf("rules in force: %d, want 3 (a's one, d's two)", got)
	}
	if strings.Contains(td.logs.String(), "descriptor reload refused") {
		t.Errorf("a descriptor reload was refused:\n%s", td.logs.String())
	}
}
