package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

type cell struct {
	mode string // plain, sync, lease
	keys int
	over bool
	unix bool // the decision API over Unix sockets (-unix), not TCP
}

func (c cell) network() string {
	if c.unix {
		return "unix"
	}
	return "tcp"
}

func (c cell) rule() string {
	if c.over {
		return c.mode + "-over"
	}
	return c.mode
}

func (c cell) load() string {
	if c.over {
		return fmt.Sprintf("overload (%d/s)", overloadRate)
	}
	return "admitted"
}

type result struct {
	n, allowed int64
	rate       float64 // decisions/s
	admitted   float64 // allowed/s
	daemonCPU  time.Duration
	daemonSys  time.Duration // of daemonCPU, in the kernel
	redisCPU   time.Duration
	clientCPU  time.Duration
	redisCmds  float64
}

// hostHeader is the Host header of a request to api: api itself, or
// localhost for a Unix socket (unix:/PATH, whose slashes a Host may not
// hold).
func hostHeader(api string) string {
	if strings.HasPrefix(api, "unix:") {
		return "localhost"
	}
	return api
}

// measure runs one cell: o.conc connections, connection w on instance
// w%3, for o.duration after a warm-up of a second (which also fills the
// sync batches and the leases).
func measure(ctx context.Context, o options, loops []*harness.Closed, apis []string, daemons []*harness.Proc, redisPs []*harness.Proc, redisAddrs []string, c cell) (result, error) {
	prefix := `{"rule":"` + c.rule() + `","key":"k`
	phase := func(d time.Duration) (result, error) {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			r     result
			first error
		)
		for j, l := range loops {
			wg.Go(func() {
				// Per connection: its key stream, and its request
				// buffer (head, then body).
				var rnds []*rand.Rand
				var reqs [][]byte
				var hosts, heads []string
				for w := j; w < o.conc; w += len(loops) {
					rnds = append(rnds, rand.New(rand.NewPCG(uint64(w), 7)))
					reqs = append(reqs, make([]byte, 0, 256))
					hosts = append(hosts, apis[w%len(apis)])
					heads = append(heads, hostHeader(apis[w%len(apis)]))
				}
				var body []byte
				next := func(i int) []byte {
					body = append(body[:0], prefix...)
					body = strconv.AppendInt(body, int64(rnds[i].IntN(c.keys)), 10)
					body = append(body, `"}`...)
					b := append(reqs[i][:0], "POST /v1/check HTTP/1.1\r\nHost: "...)
					b = append(b, heads[i]...)
					b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
					b = strconv.AppendInt(b, int64(len(body)), 10)
					b = append(b, "\r\n\r\n"...)
					b = append(b, body...)
					reqs[i] = b
					return b
				}
				var ok int64
				done := func(i, status int, answer []byte) error {
					if status != 200 {
						return fmt.Errorf("%s: %d %s", hosts[i], status, answer)
					}
					if bytes.Contains(answer, []byte(`"allowed":true`)) {
						ok++
					}
					return nil
				}
				n, err := l.Run(ctx, d, next, done)
				mu.Lock()
				r.n += n
				r.allowed += ok
				if first == nil {
					first = err
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return r, first
	}
	if _, err := phase(time.Second); err != nil {
		return result{}, err
	}
	var sys0, sys1 time.Duration // the daemons' time in the kernel
	cpu := func(sys *time.Duration) (time.Duration, time.Duration, error) {
		var sum time.Duration
		*sys = 0
		for _, p := range daemons {
			u, s, err := harness.CPUTimes(p.Cmd.Process.Pid)
			if err != nil {
				return 0, 0, err
			}
			sum += u + s
			*sys += s
		}
		var rt time.Duration
		for _, p := range redisPs {
			t, err := harness.CPUTime(p.Cmd.Process.Pid)
			if err != nil {
				return 0, 0, err
			}
			rt += t
		}
		return sum, rt, nil
	}
	// Every node's commands (one node but for -cluster).
	redisCommands := func() (int64, error) {
		var n int64
		for _, a := range redisAddrs {
			c, err := harness.RedisCommands(a)
			if err != nil {
				return 0, err
			}
			n += c
		}
		return n, nil
	}
	d0, r0, err := cpu(&sys0)
	if err != nil {
		return result{}, err
	}
	cmds0, err := redisCommands()
	if err != nil {
		return result{}, err
	}
	c0 := harness.SelfCPU()
	t0 := time.Now()
	res, err := phase(o.duration)
	elapsed := time.Since(t0)
	c1 := harness.SelfCPU()
	if err != nil {
		return result{}, err
	}
	cmds1, err := redisCommands()
	if err != nil {
		return result{}, err
	}
	d1, r1, err := cpu(&sys1)
	if err != nil {
		return result{}, err
	}
	if res.n == 0 {
		return result{}, errors.New("no decisions")
	}
	res.rate = float64(res.n) / elapsed.Seconds()
	res.admitted = float64(res.allowed) / elapsed.Seconds()
	res.daemonCPU = (d1 - d0) / time.Duration(res.n)
	res.daemonSys = (sys1 - sys0) / time.Duration(res.n)
	res.redisCPU = (r1 - r0) / time.Duration(res.n)
	res.clientCPU = (c1 - c0) / time.Duration(res.n)
	res.redisCmds = float64(cmds1-cmds0-int64(len(redisAddrs))) / float64(res.n) // minus our own INFOs
	if !c.over && res.allowed != res.n {
		return res, fmt.Errorf("%d of %d answers refused: the generous limit should admit everything", res.n-res.allowed, res.n)
	}
	return res, nil
}
