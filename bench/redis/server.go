package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// expiryStats returns INFO stats' expired_keys and
// expired_time_cap_reached_count: Redis' active expiry runs on its one
// thread, and a cycle that hits its cap blocked it for up to 25ms.
func expiryStats(addr string) [2]int64 {
	info, err := redistest.Do(addr, "INFO", "stats")
	must(err)
	var v [2]int64
	for i, f := range []string{"expired_keys:", "expired_time_cap_reached_count:"} {
		if j := strings.Index(info, f); j >= 0 {
			rest := info[j+len(f):]
			if k := strings.IndexAny(rest, "\r\n"); k >= 0 {
				rest = rest[:k]
			}
			v[i], _ = strconv.ParseInt(rest, 10, 64)
		}
	}
	return v
}

// startRedis starts a redis-server on a free loopback port, bounded: it is
// killed when the benchmark ends.
func startRedis() (port, pid int, stop func()) {
	dir, err := os.MkdirTemp("", "redisbench")
	must(err)
	port = 30000 + rand.IntN(20000)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "log"))
	must(cmd.Start())
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := redistest.Do("127.0.0.1:"+strconv.Itoa(port), "PING"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			fmt.Fprintln(os.Stderr, "redis-server did not start; run scripts/ensure-redis.sh")
			os.Exit(1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return port, cmd.Process.Pid, stop
}

// procCPU returns the user+system CPU seconds of process pid.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

func redisBenchmark(port int, sha string, pipeline int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-benchmark", "-p", strconv.Itoa(port), "-c", "64", "-n", "400000", "-P", strconv.Itoa(pipeline), "-q", "EVALSHA", sha, "0").CombinedOutput()
	must(err)
	m := rpsRE.FindAllStringSubmatch(string(out), -1)
	if len(m) == 0 {
		fmt.Fprintf(os.Stderr, "redis-benchmark: %s\n", out)
		return 0
	}
	v, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
	return v
}

func redisVersion() string {
	cmd := exec.Command("redis-server", "--version")
	b, _ := cmd.Output()
	f := strings.Fields(string(b))
	for _, x := range f {
		if strings.HasPrefix(x, "v=") {
			return x[2:]
		}
	}
	return "?"
}
