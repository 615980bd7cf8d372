package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestWriteWatch: a file written in place is "being written" from its
// first write until its writer closes it, which is reported; a file
// replaced by a rename is another inode, whole, whoever still holds the
// old one open.
func TestWriteWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mustWrite(t, path, "v1")
	w := newWriteWatch(path)
	if w == nil {
		t.Fatal("newWriteWatch: nil on Linux")
	}
	changes := make(chan bool, 16)
	done := make(chan struct{})
	go func() { w.run(func(writing bool) { changes <- writing }); close(done) }()
	defer func() { w.close(); <-done }()
	writing := func() bool {
		got, _ := w.writing(time.Now(), time.Hour)
		return got
	}
	// waitChange waits for the watch to report a change to want.
	waitChange := func(step string, want bool) {
		t.Helper()
		select {
		case got := <-changes:
			if got != want || writing() != want {
				t.Fatalf("%s: reported writing %v (writing() %v), want %v", step, got, writing(), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported within 10s", step)
		}
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("half"); err != nil {
		t.Fatal(err)
	}
	waitChange("written in place, still open", true)
	if got, left := w.writing(time.Now(), 0); got || left > 0 {
		t.Errorf("writing with no wait left = %v, %v; want false (read it anyway)", got, left)
	}
	f.Close()
	waitChange("closed by its writer", false)

	// Written in place and held open, then replaced by a rename.
	f, err = os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("stale"); err != nil {
		t.Fatal(err)
	}
	waitChange("written in place again", true)
	replaceFile(t, path, "v2")
	w.follow()
	if writing() {
		t.Error("after a rename put another file in place: still being written (the old inode's writer)")
	}
}

// TestWriteWatchDirectory: a watched directory of descriptor files reports
// the writes to the files in it that are read, not to the others (an
// editor's swap file, held open for writing the whole time it edits).
func TestWriteWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "d.yaml")
	mustWrite(t, file, "v1")
	w := newWriteWatch(dir)
	if w == nil {
		t.Fatal("newWriteWatch: nil on Linux")
	}
	changes := make(chan bool, 16)
	done := make(chan struct{})
	go func() { w.run(func(writing bool) { changes <- writing }); close(done) }()
	defer func() { w.close(); <-done }()
	open := func(path string) *os.File {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("x"); err != nil {
			t.Fatal(err)
		}
		return f
	}
	swap := open(filepath.Join(dir, ".d.yaml.swp"))
	defer swap.Close()
	f := open(file)
	wait := func(step string, want bool) {
		t.Helper()
		select {
		case got := <-changes:
			if got != want {
				t.Fatalf("%s: reported writing %v, want %v", step, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported within 10s", step)
		}
	}
	wait("d.yaml written in place, beside an open swap file", true)
	f.Close()
	wait("d.yaml closed, the swap file still open", false)
	if got, _ := w.writing(time.Now(), time.Hour); got {
		t.Error("writing() with only the swap file open = true, want false")
	}
}

// TestWriteWatchTakesInQueuedEvents: writing answers from every event
// queued when it is asked, not from what run has read so far: a reload
// asked for by another watcher, or by the poll, may come before run is
// scheduled. No run here at all.
func TestWriteWatchTakesInQueuedEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.yaml")
	mustWrite(t, path, "v1")
	writing := watchAlone(t, path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !writing() {
		t.Fatal("truncated in place and still open, run not running: writing() = false, want true")
	}
	finishWrite(t, f, writing)
}

// TestWriteWatchFollowsAFileThatCameBack: a file removed and created
// again is a new inode that no watch has seen; writing follows the path
// itself, so that the new file, empty and held open by its creator, is
// being written even before the directory's event made anyone follow it.
func TestWriteWatchFollowsAFileThatCameBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api-token")
	mustWrite(t, path, "v1")
	writing := watchAlone(t, path)
	mustRemove(t, path)
	if writing() {
		t.Fatal("removed: writing() = true, want false")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !writing() {
		t.Fatal("created again, empty, held open by its creator: writing() = false, want true")
	}
	finishWrite(t, f, writing)
}

// watchAlone watches path with no run goroutine reading its events, and
// returns what its writing says when asked.
func watchAlone(t *testing.T, path string) (writing func() bool) {
	t.Helper()
	w := newWriteWatch(path)
	if w == nil {
		t.Fatal("newWriteWatch: nil on Linux")
	}
	t.Cleanup(w.close)
	return func() bool {
		got, _ := w.writing(time.Now(), time.Hour)
		return got
	}
}

// finishWrite writes to f and closes it: writing must then say that
// nothing is being written.
func finishWrite(t *testing.T, f *os.File, writing func() bool) {
	t.Helper()
	if _, err := f.WriteString("v2"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if writing() {
		t.Fatal("closed by its writer: writing() = true, want false")
	}
}

// TestAppearing: a file met for the first time is taken as being written
// while a process holds it open for writing, empty or not, and not once
// it is closed, nor while it is only open for reading. The lease probe
// gives an answer for a file this process owns; it never keeps the lease.
func TestAppearing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !appearing(path) {
		t.Error("a file created and held open, empty: not appearing")
	}
	if _, err := f.WriteString("domain: d\n"); err != nil {
		t.Fatal(err)
	}
	if !appearing(path) {
		t.Error("a file held open for writing, its first bytes in: not appearing")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if appearing(path) {
		t.Error("a file its writer closed: appearing")
	}
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if appearing(path) {
		t.Error("a file open for reading only: appearing")
	}
	// No lease left behind: a writer opens it at once (a lease would
	// hold its open until broken).
	w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open for writing after the probes: %v, want no lease in the way", err)
	}
	w.Close()
	if appearing(filepath.Join(filepath.Dir(path), "none")) || appearing(filepath.Dir(path)) {
		t.Error("a missing path or a directory: appearing")
	}
}
