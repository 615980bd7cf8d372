package main

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

// redisCalls returns how many script calls (EVAL, EVALSHA and their _RO
// forms: for Sluice, one per round trip) Redis has run, from INFO
// commandstats, and every command it has run (total_commands_processed,
// which counts the commands scripts run too).
func redisCalls(addr string) (scripts, total int64, err error) {
	body, err := info(addr, "commandstats")
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
	total, err = redisCommands(addr)
	return scripts, total, err
}

// info returns the body of INFO section.
func info(addr, section string) (string, error) {
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

// redisCommands returns total_commands_processed from INFO stats.
func redisCommands(addr string) (int64, error) {
	body, err := info(addr, "stats")
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

// cpuTime returns utime+stime of the process from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

func loadAvg() string {
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

func numCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\nprocessor")) + 1
}

func repoRoot() (string, error) {
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

type proc struct {
	name string
	cmd  *exec.Cmd
	logs *bytes.Buffer
}

type procSet struct{ ps []*proc }

// start runs a child process; its output is kept and shown if it dies.
func (s *procSet) start(ctx context.Context, name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, logs: new(bytes.Buffer), cmd: exec.CommandContext(ctx, bin, args...)}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.ps = append(s.ps, p)
	return p, nil
}

// stopAll interrupts every child (by its PID) and waits for it.
func (s *procSet) stopAll() {
	for _, p := range s.ps {
		p.cmd.Process.Signal(os.Interrupt)
	}
	for _, p := range s.ps {
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	}
}

func freePorts(n int) ([]string, error) {
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

// waitTCP waits until addr accepts connections, bounded by 15s.
func waitTCP(ctx context.Context, addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
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
