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

// TestServeSignalBackToBack: two SIGINTs sent back to back, as a terminal
// and a wrapper send them, with the window the command ships with: a
// graceful stop, exit 0. (Sent this close the kernel may merge them into
// one; TestServeRepeatedSignal makes sure the second is seen.)
func TestServeSignalBackToBack(t *testing.T) {
	s := startSlow(t)
	s.signal(syscall.SIGINT)
	s.signal(syscall.SIGINT)
	s.waitLog("shutting down")
	s.wantGraceful("two SIGINTs back to back")
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

// slowServe is `sluice serve` as a process whose proxy has one request in
// flight: its upstream holds it until released.
type slowServe struct {
	t        *testing.T
	cmd      *exec.Cmd
	release  func()
	answered chan answer
	exited   chan error

	mu       sync.Mutex
	lines    []string      // standard error so far
	more     chan struct{} // a line was added
	logsDone chan struct{} // standard error is closed
	seen     int           // lines waitLog has looked at
}

type answer struct {
	status int
	body   string
	err    error
}

// startSlow starts `sluice serve` (with env added to its environment: NAME=value)
// and sends a request through its proxy, returning once the upstream has
// it.
func startSlow(t *testing.T, env ...string) *slowServe {
	arrived, released := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-released
		io.WriteString(w, "late answer")
	}))
	var once sync.Once
	s := &slowServe{t: t, release: func() { once.Do(func() { close(released) }) },
		answered: make(chan answer, 1), exited: make(chan error, 1), more: make(chan struct{}, 1), logsDone: make(chan struct{})}
	t.Cleanup(up.Close)
	t.Cleanup(s.release)
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nproxy: {listen: 127.0.0.1:0, upstream: %s}\nshutdown_timeout: 1m\nrules:\n  - name: r\n    rate: 10/m\n", up.URL)
	path := writeConfig(t, cfg)

	s.cmd = exec.Command(os.Args[0], "serve", "-config", path)
	s.cmd.Env = append(append(os.Environ(), "SLUICE_TEST_MAIN=1"), env...)
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
		}
	})
	go func() {
		defer close(s.logsDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
			select {
			case s.more <- struct{}{}:
			default:
			}
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
	go func() {
		<-s.logsDone // Wait must not close the pipe before the logs are read
		s.exited <- s.cmd.Wait()
	}()
	if proxy == "" {
		t.Fatalf("sluice serve printed no proxy address; logs:\n%s", s.logs())
	}
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

func (s *slowServe) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

func (s *slowServe) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// waitLog waits for a line of standard error, after those an earlier
// waitLog found, that contains substr.
func (s *slowServe) waitLog(substr string) {
	s.t.Helper()
	guard := time.After(30 * time.Second) // a hang guard, not a measurement
	for {
		s.mu.Lock()
		for ; s.seen < len(s.lines); s.seen++ {
			if strings.Contains(s.lines[s.seen], substr) {
				s.seen++
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
		select {
		case <-s.more:
		case <-s.logsDone:
			s.mu.Lock()
			left := s.seen < len(s.lines)
			s.mu.Unlock()
			if !left {
				s.t.Fatalf("sluice serve ended its standard error without %q; logs:\n%s", substr, s.logs())
			}
		case <-guard:
			s.t.Fatalf("no %q from sluice serve within 30s; logs:\n%s", substr, s.logs())
		}
	}
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
	select {
	case err := <-s.exited:
		if err != nil {
			s.t.Errorf("sluice serve after %s: %v, want exit 0; logs:\n%s", after, err, s.logs())
		}
	case <-time.After(30 * time.Second): // a hang guard, not a measurement
		s.t.Fatalf("sluice serve did not exit within 30s of %s; logs:\n%s", after, s.logs())
	}
}

// wantForced wants the process to exit 1 with the request in flight cut.
func (s *slowServe) wantForced(after string) {
	s.t.Helper()
	select {
	case err := <-s.exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			s.t.Errorf("sluice serve after %s: %v, want exit 1; logs:\n%s", after, err, s.logs())
		}
		if !strings.Contains(s.logs(), "second signal") {
			s.t.Errorf("a forced exit not told on standard error:\n%s", s.logs())
		}
	case <-time.After(30 * time.Second): // a hang guard, not a measurement
		s.t.Fatalf("sluice serve still running 30s after %s, with a request in flight and shutdown_timeout 1m", after)
	}
	if a := <-s.answered; a.err == nil {
		s.t.Errorf("the request in flight at %s: %d %q, want it cut", after, a.status, a.body)
	}
}
