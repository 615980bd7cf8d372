// Package redistest starts real redis-server processes for tests: a single
// node (StartServer; with TLS, StartTLSServer), a 3-master Redis Cluster
// (StartCluster; with TLS, StartTLSCluster; with mutual TLS,
// StartMTLSCluster) and Sentinels (StartSentinel; with a password of
// their own, StartSentinelAuth; with TLS, StartTLSSentinel), each on free
// 127.0.0.1 ports, with no persistence, stopped by PID when the test
// ends.
//
// The binaries are found on PATH. When redis-server or redis-cli is missing
// or does not start, the test fails (never skips) with a message telling how
// to install it: `make test` does, or `apt-get install -y redis-server`.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a node may take to become ready.
const startTimeout = 15 * time.Second

const installHint = "run `make test` (it installs Redis via scripts/ensure-redis.sh) or `apt-get install -y redis-server`"

// Server is one redis-server process listening on Addr (127.0.0.1:port).
// Its methods are safe for concurrent use.
type Server struct {
	Addr string
	// TLSAddr is where a server started by StartTLSServer (or
	// StartMTLSServer, StartTLSSentinel) serves TLS (127.0.0.1:port); ""
	// for the others.
	TLSAddr string

	tb      testing.TB
	port    int
	dir     string
	cluster bool
	// sentinelConf, if set, runs the process as a Sentinel with this config.
	sentinelConf string
	extra        []string // more redis-server arguments
	tlsPort      int      // StartTLSServer's TLS port; 0: none
	tlsFiles     [2]string
	tlsClientCA  string // StartMTLSServer's CA of client certificates; "": none asked for

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	logs *SyncBuffer
	held []int // sockets holding the ports of a stopped server (see hold)
}

// StartServer starts a redis-server on a free loopback port and waits until
// it answers PING. The server is stopped when the test ends.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	s := newServer(tb, false)
	tb.Cleanup(s.close)
	return s
}

// StartServerWith is StartServer with more redis-server arguments, which
// come after the defaults and so override them (for persistence:
// "--appendonly", "yes"). Its data directory is kept across Restart.
func StartServerWith(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s := newServerWith(tb, args)
	tb.Cleanup(s.close)
	return s
}

// StartMain starts a redis-server for a TestMain, which has no testing.TB
// (runnable Examples that need Redis read its Addr). The caller stops it
// (Stop) when m.Run returns; Restart must not be used on it. The error
// tells how to install Redis when it cannot start: fail, never skip.
func StartMain() (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found on PATH: %v; %s", err, installHint)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 20 {
		port, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: cannot start redis-server: %v; %s", lastErr, installHint)
}

// StartTLSServer starts a redis-server as StartServer does that also
// serves TLS on TLSAddr, with the certificate and key in the PEM files
// cert and key, and does not ask clients for certificates. Addr stays
// plain, for setting the server up with Do.
func StartTLSServer(tb testing.TB, cert, key string) *Server {
	tb.Helper()
	return startTLS(tb, cert, key, "")
}

// StartMTLSServer is StartTLSServer with Redis's tls-auth-clients yes:
// TLS clients must present a certificate that the CA in the PEM file
// clientCA signed.
func StartMTLSServer(tb testing.TB, cert, key, clientCA string) *Server {
	tb.Helper()
	return startTLS(tb, cert, key, clientCA)
}

func startTLS(tb testing.TB, cert, key, clientCA string) *Server {
	tb.Helper()
	s, err := tryStart(tb, func() (*Server, error) {
		port, err := freePort(false)
		if err != nil {
			return nil, err
		}
		tport, err := freePort(false)
		if err != nil {
			return nil, err
		}
		if tport == port {
			return nil, fmt.Errorf("port %d drawn twice", port)
		}
		return &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), TLSAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(tport)),
			tb: tb, port: port, tlsPort: tport, tlsFiles: [2]string{cert, key}, tlsClientCA: clientCA, dir: tb.TempDir()}, nil
	})
	if err != nil {
		tb.Fatalf("redistest: cannot start redis-server with TLS: %v; %s (redis-server must be built with TLS)", err, installHint)
	}
	tb.Cleanup(s.close)
	return s
}

// tryStart makes a server with mk and starts it, up to 20 times (another
// process may take a free port before redis-server binds it), and
// returns the last error if none started.
func tryStart(tb testing.TB, mk func() (*Server, error)) (*Server, error) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redistest: redis-server not found on PATH: %v; %s", err, installHint)
	}
	var lastErr error
	for range 20 {
		s, err := mk()
		if err == nil {
			if err = s.start(); err == nil {
				return s, nil
			}
		}
		lastErr = err
	}
	return nil, lastErr
}

func newServer(tb testing.TB, cluster bool) *Server {
	tb.Helper()
	return newServerOf(tb, cluster, nil)
}

// newServerWith starts a single (non-cluster) node with extra arguments.
func newServerWith(tb testing.TB, extra []string) *Server {
	tb.Helper()
	return newServerOf(tb, false, extra)
}

func newServerOf(tb testing.TB, cluster bool, extra []string) *Server {
	tb.Helper()
	s, err := tryStart(tb, func() (*Server, error) {
		port, err := freePort(cluster)
		if err != nil {
			return nil, err
		}
		return &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), tb: tb, port: port, dir: tb.TempDir(), cluster: cluster, extra: extra}, nil
	})
	if err != nil {
		tb.Fatalf("redistest: cannot start redis-server: %v; %s", err, installHint)
	}
	return s
}

// freePort returns a port that is free on 127.0.0.1 now; for a cluster node
// the bus port (port + 10000) must be free too. Both are drawn below the
// kernel's ephemeral range (32768 and up by default), from which every
// listener on port 0 and every outgoing connection of the tests running
// beside it get theirs: such a socket cannot take the port between the
// probe and redis-server's bind, nor in the instant between a Stop and its
// hold.
func freePort(cluster bool) (int, error) {
	port := 10000 + rand.IntN(12000) // its bus port below 32000 too
	ports := []int{port}
	if cluster {
		ports = append(ports, port+10000)
	}
	for _, p := range ports {
		if err := probePort(p); err != nil {
			return 0, err
		}
	}
	return port, nil
}

func (s *Server) args() []string {
	if s.sentinelConf != "" {
		return []string{s.sentinelConf, "--sentinel", "--logfile", "", "--daemonize", "no"}
	}
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", "",
		"--protected-mode", "no",
		// A replica's full sync starts at once, not after Redis'
		// default 5 s wait for more replicas to share it.
		"--repl-diskless-sync-delay", "0",
	}
	a = append(a, s.extra...)
	if s.tlsPort != 0 {
		a = append(a, "--tls-port", strconv.Itoa(s.tlsPort), "--tls-cert-file", s.tlsFiles[0], "--tls-key-file", s.tlsFiles[1])
		if s.tlsClientCA != "" {
			a = append(a, "--tls-ca-cert-file", s.tlsClientCA, "--tls-auth-clients", "yes")
		} else {
			a = append(a, "--tls-auth-clients", "no")
		}
	}
	if s.cluster {
		a = append(a, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
	}
	return a
}

// start runs redis-server and waits for its "Ready to accept connections"
// log line, then for PING.
func (s *Server) start() error {
	cmd := exec.Command("redis-server", s.args()...)
	cmd.SysProcAttr = procAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	logs := &SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			logs.Write([]byte(line + "\n"))
			if !signalled && (strings.Contains(line, "Ready to accept connections") || strings.Contains(line, "Sentinel ID is")) {
				signalled = true
				close(ready)
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.logs = cmd, done, logs
	s.mu.Unlock()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("redis-server on %s exited: %s", s.Addr, tail(logs.String()))
	case <-timer.C:
		s.stop(false)
		return fmt.Errorf("redis-server on %s not ready after %v: %s", s.Addr, startTimeout, tail(logs.String()))
	}
	// NOAUTH answers too: a server (a Sentinel) that requires a password.
	if _, err := Do(s.Addr, "PING"); err != nil && !strings.HasPrefix(err.Error(), "NOAUTH") {
		s.stop(false)
		return fmt.Errorf("redis-server on %s: PING: %w", s.Addr, err)
	}
	return nil
}

// Stop ends the server with SIGTERM and waits for it to exit; tests use it
// to simulate Redis being down. Stopping a stopped server does nothing.
// Until Restart (or the test's end) its ports stay held: connections are
// refused, and no other process can take them meanwhile (see hold).
func (s *Server) Stop() { s.stop(true) }

// close stops the server for good, when the test ends: nothing held.
func (s *Server) close() {
	s.stop(false)
	s.release()
}

// stop ends the server; hold keeps its ports for a Restart.
func (s *Server) stop(hold bool) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Process.Signal(syscall.SIGCONT) // a paused server (Pause) takes the SIGTERM now
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		cmd.Process.Kill()
		<-done
	}
	if s.tb == nil && !s.cluster { // StartMain's: nobody else cleans up
		os.RemoveAll(s.dir)
	}
	if hold && s.tb != nil {
		s.hold()
	}
}

// Restart starts the server again on the same port (after Stop) and waits
// until it is ready. The data is gone, unless StartServerWith turned
// persistence on.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.restart(); err != nil {
		s.tb.Fatalf("redistest: restart %s: %v", s.Addr, err)
	}
}

func (s *Server) restart() error {
	s.Stop()
	var err error
	for range 3 {
		if err = s.start(); err == nil {
			s.release() // redis-server listens: the port is its own again
			return nil
		}
		if strings.Contains(err.Error(), "Address already in use") {
			return fmt.Errorf("port %v taken by another process while the server was down (a bind with SO_REUSEADDR to that very port, which the hold cannot refuse): %w", s.ports(), err)
		}
	}
	return err
}

// PID returns the process id of the running server, or 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill ends the server with SIGKILL (a crash: no shutdown, no goodbye to
// replicas or sentinels) and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
	}
	s.Stop()
}

// pollPause is the pause between two readiness polls of a node that gives
// no other signal; it is not a timing assumption of any test.
func pollPause() { time.Sleep(20 * time.Millisecond) }

func tail(s string) string {
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
