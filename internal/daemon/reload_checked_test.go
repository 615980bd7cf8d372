//go:build linux

package daemon

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// setCheckedHook sets checkedHook for the test, and clears it after. The
// hook is the whole process's: t must not be parallel (t.Setenv refuses a
// parallel test).
func setCheckedHook(t *testing.T, hook func(what string)) {
	t.Setenv("SLUICE_TEST_PACKAGE_HOOKS", t.Name())
	checkedHook = hook
	t.Cleanup(func() { checkedHook = nil })
}

// replaceAfterCheck sets checkedHook to replace path, once armed, the
// first time a reload of what (a path, or "descriptors") has checked that
// its files are not being written and is about to read them: the file is
// removed and created again by a writer that writes half and pauses, the
// file open. It returns arm, and the writer's file, to be read once a
// reload result came after the hook ran.
func replaceAfterCheck(t *testing.T, what, path, half string) (arm chan struct{}, writer func() *os.File) {
	arm = make(chan struct{})
	var once sync.Once
	var f *os.File
	setCheckedHook(t, func(w string) {
		select {
		case <-arm:
		default:
			return
		}
		if w != what {
			return
		}
		once.Do(func() {
			if err := os.Remove(path); err != nil {
				t.Error(err)
				return
			}
			var err error
			if f, err = os.Create(path); err != nil {
				t.Error(err)
				return
			}
			if _, err := f.WriteString(half); err != nil {
				t.Error(err)
			}
		})
	})
	t.Cleanup(func() {
		if f != nil {
			f.Close()
		}
	})
	return arm, func() *os.File {
		if f == nil {
			t.Fatal("the hook never replaced " + path)
		}
		return f
	}
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
	td := startDaemon(t, half+"  - {name: zero, rate: 3/m}\n")
	arm, writer := replaceAfterCheck(t, td.path, td.path, half)
	close(arm)
	mustWrite(t, filepath.Join(filepath.Dir(td.path), "other"), "x") // an event in its directory: a reload
	td.putOffUntilWriting("the config file replaced after the check, half written, its writer at work")
	if got := len(td.d.Config().Rules); got != 2 {
		t.Fatalf("rules in force: %d, want the 2 of the config before (the half never applied)", got)
	}
	writeRest(t, writer(), rest)
	td.appliedWithoutFailure("the config file written and closed", func() bool { return len(td.d.Config().Rules) == 3 })
}

// TestDescriptorFileReplacedAfterCheck: as TestConfigFileReplacedAfterCheck,
// for a descriptor file: its first descriptor alone, valid, is never put
// in force; the whole file is, once its writer has closed it.
func TestDescriptorFileReplacedAfterCheck(t *testing.T) {
	td, file := descDaemon(t)
	const one = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	const rest = "  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 20}\n" +
		"  - key: k3\n    rate_limit: {unit: second, requests_per_unit: 30}\n"
	arm, writer := replaceAfterCheck(t, "descriptors", file, one)
	close(arm)
	mustWrite(t, filepath.Join(filepath.Dir(file), "other"), "x") // an event in its directory: a reload
	td.putOffUntilWriting("the descriptor file replaced after the check, half written, its writer at work")
	if got := td.d.cur.Load().descs.Rules(); got != 2 {
		t.Fatalf("descriptors in force: %d rules, want the 2 of before (the half never applied)", got)
	}
	writeRest(t, writer(), rest)
	td.appliedWithoutFailure("the descriptor file written and closed", func() bool { return td.d.cur.Load().descs.Rules() == 3 })
}
