// Package harness holds what the bench/ load runs share: starting and
// stopping child processes by PID, free loopback ports, waiting for a
// listener, a process's CPU time from /proc/PID/stat, and Redis INFO
// figures read over a plain TCP connection. Linux only (/proc).
package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisCalls returns how many script calls (EVAL, EVALSHA and their _RO
// forms: for Sluice, one per round trip) Redis has run, from INFO
// commandstats, and every command it has run (total_commands_processed,
// which counts the commands scripts run too).
func RedisCalls(addr string) (scripts, total int64, err error) {
	body, err := Info(addr, "commandstats")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(body, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro":
		default:
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if !ok || err != nil {
			return 0, 0, fmt.Errorf("INFO commandstats: %q", line)
		}
		scripts += n
	}
	total, err = RedisCommands(addr)
	return scripts, total, err
}

// Info returns the body of INFO section.
func Info(addr, section string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n", len(section), section)
	br := bufio.NewReader(c)
	hdr, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(hdr, "$") {
		return "", fmt.Errorf("INFO %s: %q %v", section, hdr, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(hdr[1:]))
	body := make([]byte, n+2)
	if _, err := ioReadFull(br, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// RedisCommands returns total_commands_processed from INFO stats.
func RedisCommands(addr string) (int64, error) {
	body, err := Info(addr, "stats")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO stats: no total_commands_processed")
}

func ioReadFull(br *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := br.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// CPUTime returns utime+stime of the process from /proc/PID/stat
// (CPUTimes).
func CPUTime(pid int) (time.Duration, error) {
	user, sys, err := CPUTimes(pid)
	return user + sys, err
}

// CPUTimes returns the process's user and system CPU time, utime and
// stime of /proc/PID/stat: every thread's, those that have exited
// included, and not its children's (cutime, cstime). The kernel counts
// them in clock ticks of 10 ms (USER_HZ), so a step's figure is exact to
// 10 ms in all, 0.1 µs per request over 100,000 requests.
func CPUTimes(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	user, sys, err = parseStat(b)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return user, sys, nil
}

// clkTck is USER_HZ, the unit of /proc/PID/stat's times: 100 on Linux
// (getconf CLK_TCK), whatever the kernel's own HZ.
const clkTck = 100

// parseStat reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line. The command name (field 2) is in parentheses and may hold spaces
// and parentheses itself: the fields are counted from the last ')'.
func parseStat(b []byte) (user, sys time.Duration, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("short line %q", b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return time.Duration(ut) * time.Second / clkTck, time.Duration(st) * time.Second / clkTck, nil
}

// LoadAvg is /proc/loadavg's first three figures.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// NumCPU counts the processors in /proc/cpuinfo.
func NumCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\nprocessor")) + 1
}

// RepoRoot is the directory of the sluice go.mod above the working one.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/sluicehq/sluice\n")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no sluice go.mod above %s", dir)
		}
	}
}

// Proc is a child process; Logs holds its output.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Logs *bytes.Buffer
	done chan struct{} // closed once Cmd.Wait returns; set by Procs.Start and Add
}

// Procs are the children a run started; StopAll ends them by PID.
type Procs struct{ ps []*Proc }

// Add takes a child started elsewhere (its Cmd already started); from
// now on Procs waits for it, so the caller must not call Cmd.Wait.
func (s *Procs) Add(p *Proc) {
	p.done = make(chan struct{})
	go func() { p.Cmd.Wait(); close(p.done) }()
	s.ps = append(s.ps, p)
}

// Start runs a child process; its output is kept and shown if it dies.
func (s *Procs) Start(ctx context.Context, name, bin string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, bin, args...)}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.Add(p)
	return p, nil
}

// StopAll interrupts every child (by its PID) and waits for it.
func (s *Procs) StopAll() {
	for _, p := range s.ps {
		p.Cmd.Process.Signal(os.Interrupt)
	}
	for _, p := range s.ps {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.Cmd.Process.Kill()
			<-p.done
		}
	}
}

// FreePorts returns n free 127.0.0.1 addresses.
func FreePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// WaitTCP waits until addr accepts connections, bounded by 15s.
func WaitTCP(ctx context.Context, addr string) error {
	return waitTCP(ctx, addr, nil)
}

// WaitListen is WaitTCP for the listener of p (started by Procs): it fails
// at once, with p's output, if p exits before addr accepts connections.
func WaitListen(ctx context.Context, addr string, p *Proc) error {
	if err := waitTCP(ctx, addr, p); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return nil
}

func waitTCP(ctx context.Context, addr string, p *Proc) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		if p != nil {
			select {
			case <-p.done:
				return fmt.Errorf("exited: %s", p.Logs)
			default:
			}
		}
		network, a := "tcp", addr
		if path, ok := strings.CutPrefix(addr, "unix:"); ok {
			network, a = "unix", path // a Unix socket, unix:/PATH
		}
		c, err := net.DialTimeout(network, a, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nothing listens on %s after 15s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process's startup
	}
}

// BuildSluice builds ./cmd/sluice from the repository into dir and returns
// the binary's path.
func BuildSluice(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sluice")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %w", err)
	}
	return bin, nil
}

// StartRedis runs a redis-server on addr (127.0.0.1), without persistence,
// and waits until it listens.
func (s *Procs) StartRedis(ctx context.Context, addr, dir string) (*Proc, error) {
	_, port, _ := net.SplitHostPort(addr)
	p, err := s.Start(ctx, "redis", "redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", dir)
	if err != nil {
		return nil, err
	}
	if err := WaitTCP(ctx, addr); err != nil {
		return nil, fmt.Errorf("redis: %w\n%s", err, p.Logs.String())
	}
	return p, nil
}

// StartRedisCluster runs a Redis Cluster of one master per address (no
// replicas), each node without persistence in its own directory under dir,
// joins them with redis-cli --cluster create (the 16384 slots split
// evenly) and waits until every node reports cluster_state:ok.
func (s *Procs) StartRedisCluster(ctx context.Context, addrs []string, dir string) ([]*Proc, error) {
	var ps []*Proc
	for i, addr := range addrs {
		_, port, _ := net.SplitHostPort(addr)
		ndir := filepath.Join(dir, "redis-node-"+port)
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return nil, err
		}
		p, err := s.Start(ctx, fmt.Sprintf("redis-%d", i), "redis-server", "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", ndir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			return nil, err
		}
		if err := WaitListen(ctx, addr, p); err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	create := exec.CommandContext(ctx, "redis-cli", args...)
	if out, err := create.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, addr := range addrs {
		for {
			if ok, err := clusterOK(addr); err == nil && ok {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return nil, fmt.Errorf("cluster node %s not ok after 15s", addr)
			}
			time.Sleep(20 * time.Millisecond) // polling the cluster's startup
		}
	}
	return ps, nil
}

// clusterOK reports whether CLUSTER INFO of the node at addr says
// cluster_state:ok.
func clusterOK(addr string) (bool, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprint(c, "*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n")
	br := bufio.NewReader(c)
	hdr, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(hdr, "$") {
		return false, fmt.Errorf("CLUSTER INFO: %q %v", hdr, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(hdr[1:]))
	body := make([]byte, n+2)
	if _, err := ioReadFull(br, body); err != nil {
		return false, err
	}
	return strings.Contains(string(body), "cluster_state:ok"), nil
}

// StartNginx runs nginx in the foreground as one process (master_process
// off: one worker, its CPU in one /proc/PID/stat), its pid, logs and temp
// files under dir, on the http-block body httpConf (included from
// dir/http.conf).
func (s *Procs) StartNginx(ctx context.Context, dir, httpConf string) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	include := filepath.Join(dir, "http.conf")
	if err := os.WriteFile(include, []byte(httpConf), 0o644); err != nil {
		return nil, err
	}
	conf := `master_process off;
pid ` + filepath.Join(dir, "nginx.pid") + `;
error_log ` + filepath.Join(dir, "error.log") + ` error;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path ` + filepath.Join(dir, "client_body") + `;
    proxy_temp_path ` + filepath.Join(dir, "proxy") + `;
    fastcgi_temp_path ` + filepath.Join(dir, "fastcgi") + `;
    uwsgi_temp_path ` + filepath.Join(dir, "uwsgi") + `;
    scgi_temp_path ` + filepath.Join(dir, "scgi") + `;
    include ` + include + `;
}
`
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return s.Start(ctx, "nginx", "nginx", "-p", dir, "-c", path, "-g", "daemon off;")
}

// RunqueueWait is how long the threads of the process have waited, ready
// to run, for a CPU (the second field of /proc/PID/task/*/schedstat,
// summed): on a busy machine, latency added in the middle of the
// process's work that no code of its own can help. A thread that exits
// takes its figure with it (the kernel keeps no sum for the process), so
// a difference of two readings undercounts when threads come and go in
// between; nginx runs one thread, and Go's runtime seldom ends one.
func RunqueueWait(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("no tasks for pid %d: %v", pid, err)
	}
	var n time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		w, err := parseSchedstat(b)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t, err)
		}
		n += w
	}
	return n, nil
}

// parseSchedstat reads the run-queue wait (the second field, ns) of a
// /proc/PID/task/TID/schedstat line: time on the CPU, time waiting for
// one, time slices.
func parseSchedstat(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("schedstat %q", b)
	}
	v, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat %q: %w", b, err)
	}
	return time.Duration(v), nil
}
