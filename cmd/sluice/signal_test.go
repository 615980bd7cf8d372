package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSignals: `sluice serve` as a process, stopped by SIGINT or
// SIGTERM while a request is in flight through its proxy: the request is
// answered in full after the signal, and the process exits 0.
func TestServeSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { serveSignal(t, sig, false) })
	}
}

// TestServeSecondSignal: a second SIGINT or SIGTERM during the graceful
// shutdown ends the process at once, exit 1, without waiting for the
// request in flight (which shutdown_timeout would let run a minute).
func TestServeSecondSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { serveSignal(t, sig, true) })
	}
}

func serveSignal(t *testing.T, sig syscall.Signal, twice bool) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "late answer")
	}))
	defer up.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nproxy: {listen: 127.0.0.1:0, upstream: %s}\nshutdown_timeout: 1m\nrules:\n  - name: r\n    rate: 10/m\n", up.URL)
	path := writeConfig(t, cfg)

	cmd := exec.Command(os.Args[0], "serve", "-config", path)
	cmd.Env = append(os.Environ(), "SLUICE_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
		}
	}()
	reProxy := regexp.MustCompile(`proxy on (http://\S+)`)
	var proxy string
	sc := bufio.NewScanner(stdout)
	for proxy == "" && sc.Scan() {
		if m := reProxy.FindStringSubmatch(sc.Text()); m != nil {
			proxy = m[1]
		}
	}
	go io.Copy(io.Discard, stdout)
	shutting := make(chan struct{})
	var logs strings.Builder
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		sc := bufio.NewScanner(stderr)
		for seen := false; sc.Scan(); {
			logs.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "shutting down") && !seen {
				seen = true
				close(shutting)
			}
		}
	}()
	go func() {
		<-logsDone // Wait must not close the pipe before the logs are read
		exited <- cmd.Wait()
	}()
	if proxy == "" {
		t.Fatalf("sluice serve printed no proxy address")
	}

	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Get(proxy + "/slow")
		if err != nil {
			answered <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- answer{resp.StatusCode, string(b), err}
	}()
	select {
	case <-arrived:
	case a := <-answered:
		t.Fatalf("the request through the proxy was answered (%d %q %v) before it reached the upstream", a.status, a.body, a.err)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-shutting:
	case err := <-exited:
		t.Fatalf("sluice serve exited (%v) on %s without a graceful shutdown; logs:\n%s", err, sig, logs.String())
	}
	if twice {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("sluice serve after a second %s: %v, want exit 1; logs:\n%s", sig, err, logs.String())
			}
			if !strings.Contains(logs.String(), "second signal") {
				t.Errorf("a forced exit not told on standard error:\n%s", logs.String())
			}
		case <-time.After(30 * time.Second): // a hang guard, not a measurement
			t.Fatalf("sluice serve still running 30s after a second %s, with a request in flight and shutdown_timeout 1m", sig)
		}
		if a := <-answered; a.err == nil {
			t.Errorf("the request in flight at the second %s: %d %q, want it cut", sig, a.status, a.body)
		}
		return
	}
	close(release) // the in-flight request ends only now, after the signal
	a := <-answered
	if a.err != nil || a.status != http.StatusOK || a.body != "late answer" {
		t.Errorf("the request in flight at %s: %d %q %v, want 200 and the upstream's whole answer", sig, a.status, a.body, a.err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("sluice serve after %s: %v, want exit 0; logs:\n%s", sig, err, logs.String())
		}
	case <-time.After(30 * time.Second): // a hang guard, not a measurement
		t.Fatalf("sluice serve did not exit within 30s of %s", sig)
	}
}
