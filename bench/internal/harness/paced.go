package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
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
	// Dial opens a connection (net.Dialer's DialContext if nil).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	newTicker func(start time.Time, period time.Duration) (ticker, error) // newTimerfdTicker if nil
}

// PacedResult is what one Paced step measured. Latencies run from each
// request's intended send time, not from when it was sent: a request
// that had to wait (for a free connection, for the generator itself) is
// as late as its user would have seen it, so no queueing is hidden.
type PacedResult struct {
	Asked     float64 // requests/s asked
	Achieved  float64 // answers/s: answered requests over max(Duration, start to last answer)
	Conns     int
	Sent      int64 // requests the schedule held (Rate × Duration)
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
	CPUPerRequest          time.Duration   // this process's CPU (rusage) per request: the generator's if the process does nothing else
	ServerCPU              []time.Duration // per server process (utime+stime) per request, in the order given
}

// ErrShortfall is a Paced step whose achieved rate fell more than 3 %
// short of the asked one: its latencies are not at the asked load.
var ErrShortfall = errors.New("paced: achieved rate short of the asked rate by more than 3%")

// Paced sends o.Request to o.Addr open loop at a constant o.Rate for
// o.Duration and reads the servers' CPU time around it. The schedule is
// uniform: request i is due at start + (i+1)/Rate, exactly, whatever
// happened to the requests before it (not Poisson: the same run twice
// asks the same load, and a uniform schedule is the gentler of the two,
// so no p99 here comes from the generator's own bursts). A dispatcher
// woken by a Linux timerfd (the kernel's high-resolution timer: Go's own
// timers wake up to a millisecond late when the process is idle, which
// would bunch the requests) hands each request, when due, to a pool of
// o.Conns keep-alive connections; a free connection sends it and reads
// the answer. When every connection is busy, due requests wait for one,
// and their wait counts in their latency. The result is returned with
// ErrShortfall when the achieved rate is short of the asked one by more
// than 3 %.
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
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	interval := time.Duration(math.Round(float64(time.Second) / o.Rate))
	if interval <= 0 {
		return PacedResult{}, errors.New("paced: Rate above 1e9/s")
	}
	n := int64(o.Duration / interval) // request i is due at (i+1)×interval from the start
	if n < 1 {
		return PacedResult{}, errors.New("paced: Duration shorter than one interval")
	}
	due := func(i int64) time.Duration { return time.Duration(i+1) * interval }

	conns := make([]*Conn, o.Conns)
	for i := range conns {
		c, err := o.Dial(ctx, "tcp", o.Addr)
		if err != nil {
			closeAll(conns)
			return PacedResult{}, fmt.Errorf("paced: dial %s: %w", o.Addr, err)
		}
		conns[i] = NewConn(c, o.Timeout)
	}
	defer closeAll(conns)

	before, err := cpuTimes(servers)
	if err != nil {
		return PacedResult{}, err
	}
	selfBefore := SelfCPU()

	// Per request, by its index: latency and lag in ns, -1 if it failed.
	lat := make([]int64, n)
	lag := make([]int64, n)
	var (
		last     atomic.Int64 // latest answer, ns since start
		errCount atomic.Int64
		non2xx   atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	// The dispatcher wakes every period (the interval, or 50 µs if the
	// interval is shorter) and hands the requests due by then to the
	// pool, in order, through slots.
	period := max(interval, 50*time.Microsecond)
	newTicker := o.newTicker
	if newTicker == nil {
		newTicker = newTimerfdTicker
	}
	slots := make(chan int64, n)
	start := time.Now()
	tk, err := newTicker(start, period)
	if err != nil {
		return PacedResult{}, err
	}
	defer tk.Close()
	for w := range conns {
		wg.Go(func() {
			c := conns[w]
			for i := range slots {
				at := due(i)
				sent := time.Since(start)
				var status int
				var err error
				if c == nil {
					err = errors.New("no connection")
				} else {
					status, _, err = c.Do(o.Request)
				}
				done := time.Since(start)
				lag[i] = int64(sent - at)
				if err != nil {
					lat[i] = -1
					errCount.Add(1)
					errOnce.Do(func() { firstErr = err })
				} else {
					lat[i] = int64(done - at)
					if status/100 != 2 && status/100 != 3 {
						non2xx.Add(1)
					}
				}
				for { // the latest answer's time
					l := last.Load()
					if int64(done) <= l || last.CompareAndSwap(l, int64(done)) {
						break
					}
				}
				if err != nil || !c.Reusable() {
					if c != nil {
						c.Close()
					}
					c = nil
					if nc, err := o.Dial(ctx, "tcp", o.Addr); err == nil {
						c = NewConn(nc, o.Timeout)
					}
					conns[w] = c
				}
			}
		})
	}
	var dispatched, ticks int64
	var tickErr error
	for dispatched < n && ctx.Err() == nil {
		k, err := tk.wait()
		if err != nil {
			tickErr = err
			break
		}
		ticks += k
		for upto := min(n, int64(time.Duration(ticks)*period/interval)); dispatched < upto; dispatched++ {
			slots <- dispatched
		}
	}
	close(slots)
	wg.Wait()
	selfCPU := SelfCPU() - selfBefore
	after, err := cpuTimes(servers)
	if err != nil {
		return PacedResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return PacedResult{}, err
	}
	if tickErr != nil {
		return PacedResult{}, fmt.Errorf("paced: timer: %w", tickErr)
	}

	r := PacedResult{Asked: o.Rate, Conns: o.Conns, Sent: dispatched, Errors: errCount.Load(), Non2xx: non2xx.Load(),
		FirstErr: firstErr, Elapsed: time.Duration(last.Load())}
	r.Answered = dispatched - r.Errors
	r.Achieved = float64(r.Answered) / max(o.Duration, r.Elapsed).Seconds()
	lat, lag = lat[:dispatched], lag[:dispatched]
	ok := slices.DeleteFunc(lat, func(v int64) bool { return v < 0 })
	slices.Sort(ok)
	slices.Sort(lag)
	r.P50, r.P90, r.P99, r.P999 = rank(ok, 0.50), rank(ok, 0.90), rank(ok, 0.99), rank(ok, 0.999)
	r.Max = rank(ok, 1)
	r.LagP50, r.LagP99, r.LagMax = rank(lag, 0.50), rank(lag, 0.99), rank(lag, 1)
	r.CPUPerRequest = selfCPU / time.Duration(max(1, dispatched))
	for i := range servers {
		r.ServerCPU = append(r.ServerCPU, (after[i]-before[i])/time.Duration(max(1, dispatched)))
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

func closeAll(conns []*Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
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

// SelfCPU is this process's user+system CPU time (getrusage).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
