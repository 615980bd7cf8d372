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
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestServeSignals: `sluice serve` as a process, stopped by SIGINT or
// SIGTERM while a request is in flight through its proxy: the request is
// answered in full after the signal, and the process exits 0.
func TestServeSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startSlow(t)
			s.signal(sig)
			s.waitLog("shutting down")
			s.wantGraceful(sig.String())
		})
	}
}

// TestServeRepeatedSignal: a SIGINT or SIGTERM that comes again within
// the repeat window (a terminal's Ctrl-C reaches the whole process group,
// and a wrapper forwards it once more) is the same request to stop: the
// graceful shutdown goes on, the request in flight is answered in full,
// exit 0. The window is an hour here, so that the second signal, sent once
// the first has started the shutdown (two signals pending at once would
// be one), falls in it however slow the machine.
func TestServeRepeatedSignal(t *testing.T) {
	for _, pair := range [][2]syscall.Signal{
		{syscall.SIGINT, syscall.SIGINT},
		{syscall.SIGTERM, syscall.SIGTERM},
		{syscall.SIGINT, syscall.SIGTERM},
	} {
		name := pair[0].String() + ", " + pair[1].String()
		t.Run(name, func(t *testing.T) {
			s := startSlow(t, "SLUICE_TEST_REPEAT_WINDOW=1h")
			s.signal(pair[0])
			s.waitLog("shutting down")
			s.signal(pair[1])
			s.waitLog("the same request to stop")
			s.wantGraceful(name)
		})
	}
}

// TestServeSecondSignal: a second SIGINT or SIGTERM once the shutdown has
// run past the repeat window ends the process at once, exit 1, without
// waiting for the request in flight (which shutdown_timeout would let run
// a minute).
func TestServeSecondSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startSlow(t)
			s.signal(sig)
			s.waitLog("shutting down")
			s.waitLog("still stopping") // the window has passed
			s.signal(sig)
			s.wantForced("a second " + sig.String())
		})
	}
}

// TestServeSIGHUPDuringShutdown: a SIGHUP during the graceful shutdown
// is told and ignored: the process neither dies of it nor reloads, the
// request in flight is answered in full under the config it began with,
// exit 0.
func TestServeSIGHUPDuringShutdown(t *testing.T) {
	s := startSlow(t)
	s.signal(syscall.SIGTERM)
	s.waitLog("shutting down")
	s.signal(syscall.SIGHUP)
	s.waitLog("SIGHUP during the shutdown: not reloading")
	s.wantGraceful("SIGTERM, then SIGHUP")
	if strings.Contains(s.logs(), "config reloaded") {
		t.Errorf("a SIGHUP during the shutdown reloaded the config:\n%s", s.logs())
	}
}

// slowServe is `sluice serve` as a process whose proxy has one request in
// flight: its upstream holds it until released.
type slowServe struct {
	*sigProc
	release  func()
	answered chan answer
}

type answer struct {
	status int
	body   string
	err    error
}

// startSlow starts `sluice serve` (with env added to its environment:
// NAME=value) and sends a request through its proxy, returning once the
// upstream has it.
func startSlow(t *testing.T, env ...string) *slowServe {
	arrived, released := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-released
		io.WriteString(w, "late answer")
	}))
	var once sync.Once
	s := &slowServe{release: func() { once.Do(func() { close(released) }) }, answered: make(chan answer, 1)}
	t.Cleanup(up.Close)
	t.Cleanup(s.release)
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nproxy: {listen: 127.0.0.1:0, upstream: %s}\nshutdown_timeout: 1m\nrules:\n  - name: r\n    rate: 10/m\n", up.URL)
	s.sigProc = startSigProc(t, writeConfig(t, cfg), env...)
	proxy := regexp.MustCompile(`proxy on (http://\S+)`).FindStringSubmatch(s.waitLog("proxy on "))[1]
	go func() {
		resp, err := http.Get(proxy + "/slow")
		if err != nil {
			s.answered <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		s.answered <- answer{resp.StatusCode, string(b), err}
	}()
	select {
	case <-arrived:
	case a := <-s.answered:
		t.Fatalf("the request through the proxy was answered (%d %q %v) before it reached the upstream", a.status, a.body, a.err)
	}
	return s
}

// wantGraceful releases the request in flight and wants it answered in
// full, and the process to exit 0.
func (s *slowServe) wantGraceful(after string) {
	s.t.Helper()
	s.release() // the in-flight request ends only now, after the signals
	a := <-s.answered
	if a.err != nil || a.status != http.StatusOK || a.body != "late answer" {
		s.t.Errorf("the request in flight at %s: %d %q %v, want 200 and the upstream's whole answer", after, a.status, a.body, a.err)
	}
	s.wantExit(after, 0)
}

// wantForced wants the process to exit 1 with the request in flight cut.
func (s *slowServe) wantForced(after string) {
	s.t.Helper()
	s.wantExit(after, 1)
	if !strings.Contains(s.logs(), "second signal") {
		s.t.Errorf("a forced exit not told on standard error:\n%s", s.logs())
	}
	if a := <-s.answered; a.err == nil {
		s.t.Errorf("the request in flight at %s: %d %q, want it cut", after, a.status, a.body)
	}
}

// sigProc is `sluice serve -config FILE` as a process, its standard
// output and error read line by line.
type sigProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	exited chan error

	mu    sync.Mutex
	lines []string      // standard output and error so far, as they came
	more  chan struct{} // a line was added
	read  chan struct{} // both are closed
	seen  int           // lines waitLog has looked at
}

// startSigProc starts `sluice serve -config path`, with env added to its
// environment (NAME=value); the test's end kills it if it still runs.
func startSigProc(t *testing.T, path string, env ...string) *sigProc {
	p := &sigProc{t: t, exited: make(chan error, 1), more: make(chan struct{}, 1), read: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "serve", "-config", path)
	p.cmd.Env = append(append(os.Environ(), "SLUICE_TEST_MAIN=1"), env...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
		}
	})
	var wg sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		wg.Go(func() {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				p.mu.Lock()
				p.lines = append(p.lines, sc.Text())
				p.mu.Unlock()
				select {
				case p.more <- struct{}{}:
				default:
				}
			}
		})
	}
	go func() {
		wg.Wait() // Wait must not close the pipes before they are read
		close(p.read)
		p.exited <- p.cmd.Wait()
	}()
	return p
}

func (p *sigProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

func (p *sigProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLog waits for a line of output, after those an earlier waitLog
// found, that contains substr, and returns it.
func (p *sigProc) waitLog(substr string) string {
	p.t.Helper()
	guard := time.After(30 * time.Second) // a hang guard, not a measurement
	for {
		p.mu.Lock()
		for ; p.seen < len(p.lines); p.seen++ {
			if line := p.lines[p.seen]; strings.Contains(line, substr) {
				p.seen++
				p.mu.Unlock()
				return line
			}
		}
		done := p.read
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-done:
			p.mu.Lock()
			left := p.seen < len(p.lines)
			p.mu.Unlock()
			if !left {
				p.t.Fatalf("sluice serve ended its output without %q; output:\n%s", substr, p.logs())
			}
		case <-guard:
			p.t.Fatalf("no %q from sluice serve within 30s; output:\n%s", substr, p.logs())
		}
	}
}

// wantExit waits for the process to exit with code.
func (p *sigProc) wantExit(after string, code int) {
	p.t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
		got := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			got = ee.ExitCode() // -1: killed by a signal
		case err != nil:
			got = -2
		}
		if got != code {
			p.t.Errorf("sluice serve after %s: %v, want exit %d; output:\n%s", after, err, code, p.logs())
		}
	case <-time.After(30 * time.Second): // a hang guard, not a measurement
		p.t.Fatalf("sluice serve still running 30s after %s; output:\n%s", after, p.logs())
	}
}
