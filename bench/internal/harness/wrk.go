package harness

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// WrkResult is what one wrk step measured.
type WrkResult struct {
	RPS           float64
	Requests      int64
	Non2xx        int64
	Errors        int64 // wrk's socket errors (connect, read, write) and timeouts: requests in none of the latencies
	P50, P99      time.Duration
	CPUPerRequest []time.Duration // per server process (utime+stime), in the order given
}

// ErrWrkSocketErrors is a wrk step with socket errors (connect, read,
// write) or timeouts: wrk leaves those requests out of its latency
// distribution (a timeout is an answer later than --timeout, or none), so
// its percentiles are of the requests that went well, and the step is
// not reported.
var ErrWrkSocketErrors = errors.New("wrk: requests failed or timed out, and are in none of its latencies")

var (
	reRPS      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reRequests = regexp.MustCompile(`(\d+) requests in`)
	reNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reErrors   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	rePct      = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)`)
)

// Wrk runs one closed-loop wrk step (wrk -tthreads -cconns for d, with
// the Lua script if not empty) against url and reads the servers' CPU time
// around it. A step with any socket error or timeout fails
// (ErrWrkSocketErrors), its result returned with the error.
func Wrk(ctx context.Context, threads, conns int, d time.Duration, url, script string, servers ...*Proc) (WrkResult, error) {
	if d < time.Second || d%time.Second != 0 {
		return WrkResult{}, fmt.Errorf("wrk: step of %v: wrk runs whole seconds only", d)
	}
	args := []string{"-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns),
		"-d" + strconv.Itoa(int(d.Seconds())) + "s", "--latency", "--timeout", "5s"}
	if script != "" {
		args = append(args, "-s", script)
	}
	args = append(args, url)
	before, err := cpuTimes(servers)
	if err != nil {
		return WrkResult{}, err
	}
	out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput()
	if err != nil {
		return WrkResult{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	after, err := cpuTimes(servers)
	if err != nil {
		return WrkResult{}, err
	}
	r, err := parseWrk(out)
	if err != nil {
		return r, err
	}
	for i := range servers {
		r.CPUPerRequest = append(r.CPUPerRequest, after[i]-before[i])
	}
	for i := range r.CPUPerRequest {
		r.CPUPerRequest[i] /= time.Duration(r.Requests)
	}
	return r, nil
}

// parseWrk reads the figures of wrk's output (run with --latency).
func parseWrk(out []byte) (WrkResult, error) {
	var r WrkResult
	if m := reRPS.FindSubmatch(out); m != nil {
		r.RPS, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if m := reRequests.FindSubmatch(out); m != nil {
		r.Requests, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if m := reNon2xx.FindSubmatch(out); m != nil {
		r.Non2xx, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	for _, m := range rePct.FindAllSubmatch(out, -1) {
		d, _ := time.ParseDuration(string(m[2]) + string(m[3]))
		if string(m[1]) == "50" {
			r.P50 = d
		} else {
			r.P99 = d
		}
	}
	if r.Requests == 0 || r.RPS == 0 {
		return r, fmt.Errorf("cannot read wrk output:\n%s", out)
	}
	if m := reErrors.FindSubmatch(out); m != nil {
		for _, f := range m[1:] {
			n, _ := strconv.ParseInt(string(f), 10, 64)
			r.Errors += n
		}
	}
	if r.Errors > 0 {
		return r, fmt.Errorf("%w: %s, beside %d requests", ErrWrkSocketErrors, reErrors.Find(out), r.Requests)
	}
	return r, nil
}
