//go:build linux

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// setCheckedHook sets checkedHook for the test, and clears it after. The
// hook is the whole process's: t must not be parallel (t.Setenv refuses a
// parallel test).
func setCheckedHook(t *testing.T, hook func(what string)) {
	t.Setenv("SLUICE_TEST_PACKAGE_HOOKS", t.Name())
	checkedHook = hook
	t.Cleanup(func() { checkedHook = nil })
}

// replacer replaces a file, once armed, the first time a reload of what
// (a path, or "descriptors") has checked that its files are not being
// written and is about to read them: path is removed and created again
// by a writer that writes half and pauses, the file open.
type replacer struct {
	what, path, half string // set before arm is closed
	arm              chan struct{}
	once             sync.Once
	done             chan struct{} // closed once the hook ran
	f                *os.File      // the writer's, once done
}

// replaceAfterCheck sets checkedHook (see setCheckedHook) to a replacer.
// It is set before the daemon runs, so that the daemon has stopped
// before it is cleared.
func replaceAfterCheck(t *testing.T) *replacer {
	r := &replacer{arm: make(chan struct{}), done: make(chan struct{})}
	setCheckedHook(t, func(w string) {
		select {
		case <-r.arm:
		default:
			return
		}
		if w != r.what {
			return
		}
		r.once.Do(func() {
			defer close(r.done)
			if err := os.Remove(r.path); err != nil {
				t.Error(err)
				return
			}
			f, err := os.Create(r.path)
			if err != nil {
				t.Error(err)
				return
			}
			r.f = f
			if _, err := f.WriteString(r.half); err != nil {
				t.Error(err)
			}
		})
	})
	t.Cleanup(func() {
		if r.f != nil {
			r.f.Close()
		}
	})
	return r
}

// writer returns the file the hook created, open, once it has.
func (r *replacer) writer(t *testing.T) *os.File {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(time.Minute): // a hang detector, not a bound
		t.Fatal("the hook did not run within a minute")
	}
	if r.f == nil {
		t.Fatal("the hook never replaced " + r.path)
	}
	return r.f
}

// TestConfigFileReplacedAfterCheck: the config file is removed and created
// again by a writer that writes its first rule and pauses, after the
// reload checked that it is not being written and before it reads it.
// The first rule alone is a valid config, and wrong: the reload does not
// apply it, it waits for the writer to close the file, and applies the
// whole file; nothing is counted as a failure.
func TestConfigFileReplacedAfterCheck(t *testing.T) {
	const half = "listen: 127.0.0.1:0\nrules:\n  - {name: one, rate: 5/m}\n"
	const rest = "  - {name: two, rate: 7/m}\n  - {name: three, rate: 9/m}\n"
	r := replaceAfterCheck(t)
	td := startDaemon(t, half+"  - {name: zero, rate: 3/m}\n")
	r.what, r.path, r.half = td.path, td.path, half
	close(r.arm)
	mustWrite(t, filepath.Join(filepath.Dir(td.path), "other"), "x") // an event in its directory: a reload
	td.lookUntil("the config file replaced after the check, half written, its writer at work", func(l string) bool {
		return strings.Contains(l, "config file is being written in place")
	})
	if got := len(td.d.Config().Rules); got != 2 {
		t.Fatalf("rules in force: %d, want the 2 of the config before (the half never applied)", got)
	}
	writeRest(t, r.writer(t), rest)
	td.appliedWithoutFailure("the config file written and closed", func() bool { return len(td.d.Config().Rules) == 3 })
}

// descHalf is a descriptor file's first descriptor, valid alone; descRest
// the rest of the file, which has three.
const (
	descHalf = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	descRest = "  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 20}\n" +
		"  - key: k3\n    rate_limit: {unit: second, requests_per_unit: 30}\n"
)

// TestDescriptorFileReplacedAfterCheck: as TestConfigFileReplacedAfterCheck,
// for a descriptor file: its first descriptor alone, valid, is never put
// in force; the whole file is, once its writer has closed it.
func TestDescriptorFileReplacedAfterCheck(t *testing.T) {
	r := replaceAfterCheck(t)
	td, file := descDaemon(t)
	r.what, r.path, r.half = "descriptors", file, descHalf
	close(r.arm)
	mustWrite(t, filepath.Join(filepath.Dir(file), "other"), "x") // an event in its directory: a reload
	// The config's watcher, in the same directory, may put its reload off
	// for the descriptor file first: the descriptor reload's own word.
	td.lookUntil("the descriptor file replaced after the check, half written, its writer at work", func(l string) bool {
		return strings.Contains(l, "descriptor file is being written in place")
	})
	if got := td.d.cur.Load().descs.Rules(); got != 2 {
		t.Fatalf("descriptors in force: %d rules, want the 2 of before (the half never applied)", got)
	}
	writeRest(t, r.writer(t), descRest)
	td.appliedWithoutFailure("the descriptor file written and closed", func() bool { return td.d.cur.Load().descs.Rules() == 3 })
}

// TestNamedFileReplacedAfterCheck: a descriptor file the config names is
// removed and created again by a writer that writes its first descriptor
// and pauses, after a reload of an edited config checked that none of
// the files it names is being written and before it reads them. Neither
// the edit nor the first descriptor alone is put in force: the reload
// waits for the writer to close the file, and then applies the edit with
// the whole file; nothing is counted as a failure.
func TestNamedFileReplacedAfterCheck(t *testing.T) {
	r := replaceAfterCheck(t)
	td, file := descDaemon(t)
	r.what, r.path, r.half = "named", file, descHalf
	close(r.arm)
	replaceFile(t, td.path, "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [d.yaml]\nrules:\n  - {name: keep, rate: 3/m}\n  - {name: added, rate: 4/m}\n")
	// The descriptor watcher may put its own reload off first: the
	// config reload's word.
	td.lookUntil("a descriptor file replaced after the config reload's check, half written, its writer at work", func(l string) bool {
		return strings.Contains(l, "changed while the reload read it")
	})
	if rules, descs := len(td.d.Config().Rules), td.d.cur.Load().descs.Rules(); rules != 1 || descs != 2 {
		t.Fatalf("in force: %d rules, %d descriptor rules; want the 1 and 2 of before (neither the edit nor the half applied)", rules, descs)
	}
	writeRest(t, r.writer(t), descRest)
	td.appliedWithoutFailure("the descriptor file written and closed", func() bool {
		return len(td.d.Config().Rules) == 2 && td.d.cur.Load().descs.Rules() == 3
	})
}
