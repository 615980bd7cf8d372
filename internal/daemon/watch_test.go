package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestDebounce drives the debouncer with fake time: a burst fires once,
// after the quiet period; separate bursts fire separately; an endless burst
// still fires at the cap.
func TestDebounce(t *testing.T) {
	const delay = 100 * time.Millisecond
	tests := []struct {
		name   string
		events []time.Duration // offsets from t0 at which an event arrives
		until  time.Duration   // observe until t0+until
		want   []time.Duration // offsets at which fire runs
	}{
		{"single event", []time.Duration{0}, time.Second, []time.Duration{delay}},
		{"burst fires once after the last event", []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond}, time.Second, []time.Duration{150 * time.Millisecond}},
		{"two bursts", []time.Duration{0, 20 * time.Millisecond, 500 * time.Millisecond}, time.Second, []time.Duration{120 * time.Millisecond, 600 * time.Millisecond}},
		{"no events", nil, time.Second, nil},
		{"endless burst capped at 10 periods", every(0, 45*time.Millisecond, 40), 2 * time.Second, []time.Duration{time.Second, 1755*time.Millisecond + delay}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				t0 := time.Now()
				in := make(chan struct{})
				var got []time.Duration
				done := make(chan struct{})
				go func() {
					debounce(ctx, in, delay, func() { got = append(got, time.Since(t0)) })
					close(done)
				}()
				for _, at := range tc.events {
					time.Sleep(t0.Add(at).Sub(time.Now()))
					in <- struct{}{}
				}
				time.Sleep(t0.Add(tc.until).Sub(time.Now()))
				cancel()
				<-done
				if len(got) != len(tc.want) {
					t.Fatalf("debounce fired at %v, want %v", got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("debounce fire %d at %v, want %v (all: %v)", i, got[i], tc.want[i], got)
					}
				}
			})
		})
	}
}

func every(start, step time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = start + time.Duration(i)*step
	}
	return out
}

// TestWatchConfig changes a real file in the ways editors and Kubernetes do
// and expects a notice for each. Each step waits for the notice (bounded by
// a generous deadline that only fires on failure), never a sleep. A step
// may produce several events; the content after the notice is what counts.
func TestWatchConfig(t *testing.T) {
	dir := t.TempDir()
	// Kubernetes layout: config.yaml -> ..data/config.yaml, ..data -> ..v1
	mustMkdir(t, filepath.Join(dir, "..v1"))
	mustWrite(t, filepath.Join(dir, "..v1", "config.yaml"), "v1")
	mustSymlink(t, "..v1", filepath.Join(dir, "..data"))
	mustSymlink(t, filepath.Join("..data", "config.yaml"), filepath.Join(dir, "config.yaml"))
	path := filepath.Join(dir, "config.yaml")

	ctx, cancel := context.WithCancel(t.Context())
	changed := make(chan struct{}, 1)
	cw, err := newConfigWatcher(path)
	if err != nil {
		t.Fatalf("newConfigWatcher: %v", err)
	}
	done := make(chan struct{})
	go func() { cw.run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), changed); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		cw.Close()
	})

	steps := []struct {
		name   string
		change func()
		want   string
	}{
		{"symlink swap of ..data", func() {
			mustMkdir(t, filepath.Join(dir, "..v2"))
			mustWrite(t, filepath.Join(dir, "..v2", "config.yaml"), "v2")
			mustSymlink(t, "..v2", filepath.Join(dir, "..data_tmp"))
			mustRename(t, filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data"))
		}, "v2"},
		{"write in place through the link", func() {
			mustWrite(t, filepath.Join(dir, "..v2", "config.yaml"), "v3")
		}, "v3"},
		{"rename-replace of the file itself", func() {
			mustRemove(t, path)
			mustWrite(t, filepath.Join(dir, ".config.yaml.swp"), "v4")
			mustRename(t, filepath.Join(dir, ".config.yaml.swp"), path)
		}, "v4"},
		{"write after the replace", func() { mustWrite(t, path, "v5") }, "v5"},
	}
	for _, s := range steps {
		drain(changed)
		s.change()
		waitNotice(t, changed)
		// Events may arrive in several notices; the content is what counts.
		if got, err := os.ReadFile(path); err != nil || string(got) != s.want {
			t.Errorf("%s: content %q, %v; want %q", s.name, got, err, s.want)
		}
	}
}

func waitNotice(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("configWatcher: no change notice within 10s")
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestSweepEvery: the memory store is swept once per interval, with the
// tick's time, and not after the context ends.
func TestSweepEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		t0 := time.Now()
		var got []time.Duration
		done := make(chan struct{})
		go func() {
			onTick(ctx, time.Minute, func(now time.Time) { got = append(got, now.Sub(t0)) })
			close(done)
		}()
		time.Sleep(3*time.Minute + 30*time.Second)
		cancel()
		<-done
		want := []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute}
		if len(got) != len(want) {
			t.Fatalf("onTick called at %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("sweep %d at %v, want %v", i, got[i], want[i])
			}
		}
	})
}

// TestWatchPollFallback: with the inotify watch lost behind the watcher's
// back (as a directory deleted and made again can make it happen, or a
// filesystem that sends no events), a change of the file is still
// reported, by the watcher's own look at the file (watchPoll); a file of
// descriptors in a watched directory too.
func TestWatchPollFallback(t *testing.T) {
	for _, dirMode := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "sluice.yaml")
		mustWrite(t, path, "v1")
		watched := path
		if dirMode {
			watched = dir
		}
		cw, err := newConfigWatcher(watched)
		if err != nil {
			t.Fatalf("newConfigWatcher: %v", err)
		}
		cw.poll = 20 * time.Millisecond
		for d := range cw.watched {
			if err := cw.w.Remove(d); err != nil { // lost, as far as inotify goes
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		changed := make(chan struct{}, 1)
		done := make(chan struct{})
		go func() { cw.run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), changed); close(done) }()

		mustWrite(t, path, "version two")
		select {
		case <-changed:
		case <-time.After(time.Minute): // a hang detector, far above the 20ms poll
			t.Fatalf("dir mode %v: a change with the watch lost was not reported within a minute", dirMode)
		}
		cancel()
		<-done
		cw.Close()
	}
}
