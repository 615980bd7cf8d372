// Package redistest starts real redis-server processes for tests: a single
// node (StartServer) and a 3-master Redis Cluster (StartCluster), each on
// free 127.0.0.1 ports, with no persistence, stopped by PID when the test
// ends.
//
// The binaries are found on PATH. When redis-server or redis-cli is missing
// or does not start, the test fails (never skips) with a message telling how
// to install it: `make test` does, or `apt-get install -y redis-server`.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

	tb      testing.TB
	port    int
	dir     string
	cluster bool
	// sentinelConf, if set, runs the process as a Sentinel with this config.
	sentinelConf string
	extra        []string // more redis-server arguments

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	logs *SyncBuffer
}

// StartServer starts a redis-server on a free loopback port and waits until
// it answers PING. The server is stopped when the test ends.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	s := newServer(tb, false)
	tb.Cleanup(s.Stop)
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
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redistest: redis-server not found on PATH: %v; %s", err, installHint)
	}
	var lastErr error
	for range 20 {
		port, err := freePort(cluster)
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), tb: tb, port: port, dir: tb.TempDir(), cluster: cluster, extra: extra}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	tb.Fatalf("redistest: cannot start redis-server: %v; %s", lastErr, installHint)
	return nil
}

// freePort returns a port that is free on 127.0.0.1 now; for a cluster node
// the bus port (port + 10000) must be free too.
func freePort(cluster bool) (int, error) {
	port := 20000 + rand.IntN(25000)
	ports := []int{port}
	if cluster {
		ports = append(ports, port+10000)
	}
	for _, p := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return 0, err
		}
		ln.Close()
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
	}
	a = append(a, s.extra...)
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
		s.Stop()
		return fmt.Errorf("redis-server on %s not ready after %v: %s", s.Addr, startTimeout, tail(logs.String()))
	}
	if _, err := Do(s.Addr, "PING"); err != nil {
		s.Stop()
		return fmt.Errorf("redis-server on %s: PING: %w", s.Addr, err)
	}
	return nil
}

// Stop ends the server with SIGTERM and waits for it to exit; tests use it
// to simulate Redis being down. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
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
}

// Restart starts the server again on the same port (after Stop) and waits
// until it is ready. The data is gone: there is no persistence.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	var err error
	for range 50 { // the port may be briefly held by the old process' socket
		if err = s.start(); err == nil {
			return
		}
	}
	s.tb.Fatalf("redistest: restart %s: %v", s.Addr, err)
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

// StartSentinel starts one Redis Sentinel on a free loopback port that
// monitors master under the name "mymaster" (quorum 1, master down after
// 5s), and waits until it knows the master. It returns the sentinel's
// address; the sentinel is stopped when the test ends.
func StartSentinel(tb testing.TB, master *Server) string {
	tb.Helper()
	return StartSentinelFor(tb, master, 5*time.Second, nil)
}

// StartSentinelFor is StartSentinel with the time after which the sentinel
// considers an unanswering master down (and fails over to a replica), and
// the replicas it must know before it returns (it learns them from the
// master's INFO).
func StartSentinelFor(tb testing.TB, master *Server, downAfter time.Duration, replicas []*Server) string {
	tb.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	var lastErr error
	for range 20 {
		p, err := freePort(false)
		if err != nil {
			lastErr = err
			continue
		}
		dir := tb.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 1\n"+
			"sentinel down-after-milliseconds mymaster %d\nsentinel failover-timeout mymaster %d\n",
			p, dir, host, port, downAfter.Milliseconds(), max(10*downAfter.Milliseconds(), 1000))
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), tb: tb, port: p, dir: dir, sentinelConf: conf}
		if lastErr = s.start(); lastErr != nil {
			continue
		}
		tb.Cleanup(s.Stop)
		deadline := time.Now().Add(startTimeout)
		for {
			got, err := Do(s.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
			ok := err == nil && got == host+"\n"+port
			if ok && len(replicas) > 0 {
				known, err := Do(s.Addr, "SENTINEL", "REPLICAS", "mymaster")
				for _, r := range replicas {
					ok = ok && err == nil && strings.Contains(known, r.Addr)
				}
			}
			if ok {
				return s.Addr
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: sentinel %s does not know its master %s and replicas: %q %v", s.Addr, master.Addr, got, err)
			}
			pollPause()
		}
	}
	tb.Fatalf("redistest: cannot start a sentinel: %v; %s", lastErr, installHint)
	return ""
}

// StartReplica starts a redis-server replicating master and waits until
// its link to the master is up. It is stopped when the test ends.
func StartReplica(tb testing.TB, master *Server) *Server {
	tb.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	s := newServerWith(tb, []string{"--replicaof", host, port})
	tb.Cleanup(s.Stop)
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := Do(s.Addr, "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: replica %s of %s not linked: %q %v", s.Addr, master.Addr, info, err)
		}
		pollPause()
	}
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

// Cluster is a Redis Cluster of three masters and no replicas, each node on
// its own loopback port; Addrs are the nodes' addresses.
type Cluster struct {
	Addrs []string

	Nodes []*Server
}

// StartCluster starts three cluster-enabled redis-server nodes, joins them
// with `redis-cli --cluster create`, and waits until every node reports
// cluster_state:ok. The nodes are stopped when the test ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redistest: redis-cli not found on PATH: %v; %s", err, installHint)
	}
	c := &Cluster{}
	for range 3 {
		s := newServer(tb, true)
		tb.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.Command("redis-cli", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runBounded(cmd, startTimeout); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out.String())
	}
	deadline := time.Now().Add(startTimeout)
	for _, addr := range c.Addrs {
		for {
			info, err := Do(addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ok after %v: %v %q", addr, startTimeout, err, info)
			}
			pollPause()
		}
	}
	return c
}

// pollPause is the pause between two readiness polls of a node that gives
// no other signal; it is not a timing assumption of any test.
func pollPause() { time.Sleep(20 * time.Millisecond) }

func runBounded(cmd *exec.Cmd, d time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-errc:
		return err
	case <-timer.C:
		cmd.Process.Kill()
		<-errc
		return fmt.Errorf("timed out after %v", d)
	}
}

// Do sends one command to the Redis at addr over a fresh connection and
// returns the reply as text (bulk and simple strings, integers; arrays are
// joined with newlines). A Redis error reply is returned as an error. It is
// meant for test setup and inspection, not for load.
func Do(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}

func tail(s string) string {
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: the output of a
// process the test started, written while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
