package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// TestHotReloadWaitsForWriter: a config written in place (truncated, then
// written) by a writer that pauses half-way, as a slow copy or a program
// writing in chunks does, must not be read while the writer still has it
// open: the part written so far can be a valid config without the rules
// still to come, and applying it would drop them. The daemon waits for the
// writer to close the file, then applies the whole.
func TestHotReloadWaitsForWriter(t *testing.T) {
	const head = "listen: 127.0.0.1:0\nrules:\n  - {name: a, rate: 3/h}\n"
	td := startDaemon(t, head+"  - {name: b, rate: 3/h}\n")
	f, err := os.OpenFile(td.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(head); err != nil {
		t.Fatal(err)
	}
	// The first attempt after the pause must wait for the writer.
	r := td.nextAttempt()
	if !r.Writing {
		t.Fatalf("reload while the file is half-written and still open: %+v, rules in force:\n%s\nwant it to wait for the writer (Writing)", r, rulesInForce(t, td))
	}
	if body := rulesInForce(t, td); !strings.Contains(body, `"b"`) {
		t.Fatalf("rules in force while the file is being written: %s, want a and b still", body)
	}
	if logs := td.logs.String(); !strings.Contains(logs, "config file is being written in place: waiting for its writer to close it") {
		t.Errorf("logs while the file is being written do not say so:\n%s", logs)
	}
	if _, err := f.WriteString("  - {name: b, rate: 3/h}\n  - {name: c, rate: 1/s}\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload after the writer closed the file: %v", r.Err)
	}
	if body := rulesInForce(t, td); !strings.Contains(body, `"b"`) || !strings.Contains(body, `"c"`) {
		t.Errorf("rules in force after the write: %s, want a, b and c", body)
	}
	if got := td.metric("sluice_config_reloads_total", "result", "success"); got != 1 {
		t.Errorf("sluice_config_reloads_total{result=success} = %v, want 1 (the whole file, never its first half)", got)
	}
}

// nextAttempt waits for the next reload attempt that did not find the
// content unchanged: one applied or refused, or one put off while the file
// is being written.
func (td *testDaemon) nextAttempt() ReloadResult {
	td.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-td.reloads:
			if r.Unchanged {
				continue
			}
			return r
		case <-deadline:
			td.t.Fatal("no reload attempt within 10s")
			return ReloadResult{}
		}
	}
}

// TestHotReloadWriterHoldsFile: a process that wrote to the config file in
// place and keeps it open (it never closes it, or hangs) holds the reload
// back for maxWriteWait after its first write at most, not for ever.
func TestHotReloadWriterHoldsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	mustWrite(t, path, reloadBase)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	reloads := make(chan ReloadResult, 16)
	d, err := New(cfg, Options{ConfigPath: path, ReloadDebounce: 20 * time.Millisecond,
		OnReload: func(r ReloadResult) { reloads <- r }})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if d.watcher == nil || d.watcher.writes == nil {
		t.Skip("no inotify write watch here")
	}
	d.watcher.writeWait = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.Replace(reloadBase, "name: keep", "name: held", 1)); err != nil {
		t.Fatal(err)
	}
	putOff := false
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-reloads:
			switch {
			case r.Writing:
				putOff = true
				continue
			case r.Unchanged:
				continue
			case r.Err != nil:
				t.Fatalf("reload: %v", r.Err)
			}
			if !putOff {
				t.Errorf("applied without waiting for the writer first")
			}
			if got := d.Config().Rules[0].Name; got != "held" {
				t.Errorf("after the wait, rule %q in force, want held", got)
			}
			return
		case <-deadline:
			t.Fatalf("no reload within 10s of a write whose writer keeps the file open (writeWait %v)", d.watcher.writeWait)
		}
	}
}

// TestDescriptorReloadWaitsForWriter: as for the config file, an Envoy
// descriptor file written in place is not read while its writer still has
// it open, whether grpc.config names the file or its directory: the
// descriptors written so far would be applied as the whole domain.
func TestDescriptorReloadWaitsForWriter(t *testing.T) {
	const (
		head = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
		k2   = "  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
		k3   = "  - key: k3\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	)
	for _, named := range []string{"rl/d.yaml", "rl"} {
		t.Run(named, func(t *testing.T) {
			dir := t.TempDir()
			mustMkdir(t, filepath.Join(dir, "rl"))
			file := filepath.Join(dir, "rl", "d.yaml")
			mustWrite(t, file, head+k2)
			path := filepath.Join(dir, "sluice.yaml")
			mustWrite(t, path, "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: ["+named+"]\nrules:\n  - {name: keep, rate: 3/m}\n")
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
				t.Fatalf("descriptor reload while the file is half-written and still open: %+v, %d limits in force; want it to wait for the writer (Writing)", r, td.d.descriptorSet().Rules())
			}
			if got := td.d.descriptorSet().Rules(); got != 2 {
				t.Fatalf("limits in force while the file is being written: %d, want the 2 of before", got)
			}
			if _, err := f.WriteString(k2 + k3); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if r := td.waitReload(); r.Err != nil {
				t.Fatalf("descriptor reload after the writer closed the file: %v", r.Err)
			}
			if got := td.d.descriptorSet().Rules(); got != 3 {
				t.Errorf("limits in force after the write: %d, want 3", got)
			}
		})
	}
}
