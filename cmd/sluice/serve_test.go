package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var reAPI = regexp.MustCompile(`decision API on (http://\S+)`)

// runServe runs serve in the background and returns the decision API's URL
// as printed, a cancel func and the exit code channel.
func runServe(t *testing.T, args ...string) (api string, cancel context.CancelFunc, code <-chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, args, pw, &lockedWriter{w: &stderr})
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := reAPI.FindStringSubmatch(sc.Text()); m != nil {
			api = m[1]
			break
		}
	}
	if api == "" {
		cancel()
		t.Fatalf("serve %v printed no decision API address (exit %d)", args, <-done)
	}
	// Keep draining stdout so serve never blocks on it.
	go func() {
		for sc.Scan() {
		}
	}()
	return api, cancel, done
}

// TestServeBuiltinExample: with no -config, serve runs the built-in example
// on the memory store, prints where it listens, answers /healthz, and
// exits 0 on cancel.
func TestServeBuiltinExample(t *testing.T) {
	api, cancel, code := runServe(t)
	resp, err := http.Get(api + "/healthz")
	if err != nil {
		t.Fatalf("GET %s/healthz: %v", api, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s/healthz: %d, want 200", api, resp.StatusCode)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("serve after cancel: exit %d, want 0", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30s of cancel")
	}
}

// TestServeConfigFile runs serve on a config file with a proxy on :0.
func TestServeConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nrules:\n  - name: r\n    rate: 1/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	api, cancel, code := runServe(t, "-config", path)
	resp, err := http.Get(api + "/v1/rules")
	if err != nil {
		t.Fatalf("GET /v1/rules: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/rules: %d, want 200", resp.StatusCode)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("serve -config after cancel: exit %d, want 0", c)
	}
}

// TestServeSIGHUP: SIGHUP rereads the config file, even unchanged.
func TestServeSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nrules:\n  - name: r\n    rate: 1/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	api, cancel, code := runServe(t, "-config", path)
	defer func() {
		cancel()
		if c := <-code; c != 0 {
			t.Errorf("serve after cancel: exit %d, want 0", c)
		}
	}()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The reload runs in the background: poll /metrics, bounded.
	want := `sluice_config_reloads_total{result="success"} 1`
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(api + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s of SIGHUP", want)
		}
		time.Sleep(10 * time.Millisecond) // polling the metrics endpoint
	}
}

func TestServeBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nrules:\n  - name: r\n    rate: banana\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	if c := serve(context.Background(), []string{"-config", path}, &stdout, &stderr); c != 1 {
		t.Errorf("serve -config bad.yaml: exit %d, want 1", c)
	}
	if !strings.Contains(stderr.String(), "bad.yaml:4") {
		t.Errorf("serve -config bad.yaml: stderr %q, want the file:line of the problem", stderr.String())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
