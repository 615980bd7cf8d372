package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PacedOptions is one open-loop step of Paced.
type PacedOptions struct {
	Addr     string        // host:port the connections open to
	Request  []byte        // one complete HTTP/1.1 request, sent as is every time (GetRequest)
	Rate     float64       // requests per second asked
	Duration time.Duration // how long requests are started for
	// Conns is the pool of keep-alive connections; 0 sizes it for the
	// rate: enough for every request of 2 ms to be in flight at once
	// (Little's law at 2 ms, 10 times the latency of these servers when
	// not queueing), at least 4, at most 256.
	Conns int
	// Timeout bounds each request (5s if zero); a request past it is an
	// error.
	Timeout time.Duration
	// Tick is the shortest period of the generator's timer (DefaultTick
	// if zero): at rates above 1/Tick the requests due within one tick
	// go out together at its end, and their wait counts in their
	// latency, as any lateness of the generator does.
	Tick time.Duration
}

// DefaultTick is Paced's shortest timer period: the generator wakes at
// most 5,000 times a second. Each wake-up of an idle thread costs about
// 10 µs of CPU on the 2-core VM the benchmarks run on (timer, idle exit,
// context switch), CPU taken from the servers under measurement: at
// 20,000 requests/s a tick per request (50 µs) made the generator the
// machine's largest consumer (25–30 µs per request) and its wake-ups
// alone added milliseconds to the servers' p99; with 200 µs it costs
// 11–13 µs per request. The price is up to 200 µs of send lag, the same
// for every config measured at one rate.
const DefaultTick = 200 * time.Microsecond

// PacedResult is what one Paced step measured. Latencies run from each
// request's intended send time, not from when it was sent: a request
// that had to wait (for a free connection, for the generator itself) is
// as late as its user would have seen it, so no queueing is hidden.
type PacedResult struct {
	Asked     float64 // requests/s asked
	Achieved  float64 // answers/s: answered requests over max(Duration, start to last answer)
	Conns     int
	Sent      int64 // requests the schedule held (Rate × Duration)
	Wakeups   int64 // times the generator woke (timer reads): at most one per tick
	Answered  int64 // requests answered, whatever the status
	Errors    int64 // requests failed (connection error, timeout, malformed answer)
	Non2xx    int64 // answers outside 2xx and 3xx, as wrk counts them
	FirstErr  error
	Elapsed   time.Duration // start to last answer
	P50, P90  time.Duration // latency from the intended send time, of answered requests
	P99, P999 time.Duration
	Max       time.Duration
	// LagP50, LagP99 and LagMax: how late requests were sent after their
	// intended time (timer wake-up, a busy pool, the generator's own CPU);
	// already inside the latencies, shown apart to tell the generator's
	// share.
	LagP50, LagP99, LagMax time.Duration
	// SentP50 and SentP99: latency from the actual send, as a closed-loop
	// tool times it: without the generator's lateness nor any wait for a
	// connection. Not the measure (it hides queueing); shown to tell the
	// servers' share of a tail from the generator's.
	SentP50, SentP99 time.Duration
	CPUPerRequest    time.Duration   // this process's CPU (rusage) per request: the generator's if the process does nothing else
	ServerCPU        []time.Duration // per server process (utime+stime) per request, in the order given
	// CPUPressure is the share of the step's time during which some task
	// of the machine was ready to run and waited for a CPU (Linux PSI,
	// /proc/pressure/cpu "some"; -1 where the kernel has none): queueing
	// for the cores, which is latency no server can help.
	CPUPressure float64
}

// ErrShortfall is a Paced step whose achieved rate fell more than 3 %
// short of the asked one: its latencies are not at the asked load.
var ErrShortfall = errors.New("paced: achieved rate short of the asked rate by more than 3%")

// Paced sends o.Request to o.Addr open loop at a constant o.Rate for
// o.Duration and reads the servers' CPU time around it. The schedule is
// uniform: request i is due at start + (i+1)/Rate, exactly, whatever
// happened to the requests before it (not Poisson: the same run twice
// asks the same load, and a uniform schedule is the gentler of the two).
// An event loop on one OS thread (pacedLoop), woken only by a Linux
// timerfd every max(1/Rate, o.Tick), sends the requests due by each tick
// on idle connections of a pool of o.Conns keep-alive ones (o.Addr must
// resolve to an IP address) and times each answer by the kernel's
// receive stamp, not by when the loop reads it; when every connection is
// busy, due requests wait for one, and their wait counts in their
// latency. The result is returned with ErrShortfall when the achieved
// rate is short of the asked one by more than 3 %.
func Paced(ctx context.Context, o PacedOptions, servers ...*Proc) (PacedResult, error) {
	if o.Rate <= 0 || o.Duration <= 0 || len(o.Request) == 0 {
		return PacedResult{}, errors.New("paced: Rate, Duration and Request are required")
	}
	if o.Conns <= 0 {
		o.Conns = min(256, max(4, int(math.Ceil(o.Rate*0.002))))
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	interval := time.Duration(math.Round(float64(time.Second) / o.Rate))
	if interval <= 0 {
		return PacedResult{}, errors.New("paced: Rate above 1e9/s")
	}
	n := int64(o.Duration / interval) // request i is due at (i+1)×interval from the start
	if n < 1 {
		return PacedResult{}, errors.New("paced: Duration shorter than one interval")
	}
	// The timer ticks every interval, or every o.Tick if the interval is
	// shorter; each tick sends the requests due by then.
	l, err := newPacedLoop(ctx, o, interval, max(interval, o.Tick), n)
	if err != nil {
		return PacedResult{}, err
	}
	defer l.close()

	before, err := cpuTimes(servers)
	if err != nil {
		return PacedResult{}, err
	}
	selfBefore, psiBefore, t0 := SelfCPU(), CPUPressure(), time.Now()
	if err := l.run(); err != nil {
		return PacedResult{}, err
	}
	selfCPU, psi, wall := SelfCPU()-selfBefore, CPUPressure()-psiBefore, time.Since(t0)
	after, err := cpuTimes(servers)
	if err != nil {
		return PacedResult{}, err
	}

	r := PacedResult{Asked: o.Rate, Conns: o.Conns, Sent: n, Wakeups: l.wakeups, Errors: l.errors, Non2xx: l.non2xx,
		FirstErr: l.firstErr, Elapsed: l.last, CPUPressure: -1}
	if psiBefore >= 0 && psi >= 0 {
		r.CPUPressure = float64(psi) / float64(wall)
	}
	sent := make([]int64, 0, len(l.lat))
	for i, v := range l.lat {
		if v != failed {
			sent = append(sent, v-l.lag[i])
		}
	}
	slices.Sort(sent)
	r.SentP50, r.SentP99 = rank(sent, 0.50), rank(sent, 0.99)
	ok := slices.DeleteFunc(l.lat, func(v int64) bool { return v == failed })
	r.Answered = int64(len(ok))
	r.Achieved = float64(r.Answered) / max(o.Duration, r.Elapsed).Seconds()
	slices.Sort(ok)
	slices.Sort(l.lag)
	r.P50, r.P90, r.P99, r.P999 = rank(ok, 0.50), rank(ok, 0.90), rank(ok, 0.99), rank(ok, 0.999)
	r.Max = rank(ok, 1)
	r.LagP50, r.LagP99, r.LagMax = rank(l.lag, 0.50), rank(l.lag, 0.99), rank(l.lag, 1)
	r.CPUPerRequest = selfCPU / time.Duration(n)
	for i := range servers {
		r.ServerCPU = append(r.ServerCPU, (after[i]-before[i])/time.Duration(n))
	}
	if r.Achieved < 0.97*o.Rate {
		return r, fmt.Errorf("%w: %.0f/s of %.0f/s asked (%d of %d answered, %d errors, last answer %v after the start, sends up to %v late)",
			ErrShortfall, r.Achieved, o.Rate, r.Answered, n, r.Errors, r.Elapsed.Round(time.Millisecond), r.LagMax.Round(time.Microsecond))
	}
	return r, nil
}

// rank is the nearest-rank q-quantile of sorted ns values (0 if none).
func rank(sorted []int64, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return time.Duration(sorted[min(max(k, 0), len(sorted)-1)])
}

// cpuTimes reads each process's CPU time (CPUTime).
func cpuTimes(ps []*Proc) ([]time.Duration, error) {
	ts := make([]time.Duration, len(ps))
	for i, p := range ps {
		var err error
		if ts[i], err = CPUTime(p.Cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// SelfCPU is this process's user+system CPU time (getrusage): a load
// generator's own cost, the child processes it started not included.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUPressure is the time some task has waited for a CPU since boot
// (/proc/pressure/cpu, the "some" line's total), -1 if unknown.
func CPUPressure() time.Duration {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return -1
	}
	return parsePressure(b)
}

// parsePressure reads the "some" line's total (µs) of /proc/pressure/cpu,
// -1 if there is none.
func parsePressure(b []byte) time.Duration {
	_, rest, ok := strings.Cut(string(b), "some ")
	if !ok {
		return -1
	}
	line, _, _ := strings.Cut(rest, "\n")
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "total="); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return time.Duration(us) * time.Microsecond
		}
	}
	return -1
}
