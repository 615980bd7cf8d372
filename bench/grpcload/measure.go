package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

type row struct {
	target        string
	client        string // the load generator's client: lean or proto
	conc, keys    int
	n, errs       int64
	rate          float64
	p50, p99      time.Duration
	cpu           time.Duration // server CPU per decision
	clientCPU     time.Duration // the load generator's CPU per call
	redisCPU      time.Duration // Redis' CPU per decision; -1 when no Redis
	redisCmds     float64       // Redis commands per decision, those run by scripts included; -1 when no Redis
	redisCalls    float64       // script calls (round trips) per decision; -1 when no Redis
	overallOK     int64
	floorCPURatio float64
}

// measure runs one cell: c workers over o.conns connections for
// o.duration, after a short warm-up.
func measure(ctx context.Context, o options, client, addr string, p *harness.Proc, redisAddr string, redisP *harness.Proc, c, keys int) (row, error) {
	conns := make([]*grpc.ClientConn, o.conns)
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if client == "lean" {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	}
	for i := range conns {
		cc, err := grpc.NewClient(addr, dial...)
		if err != nil {
			return row{}, err
		}
		defer cc.Close()
		conns[i] = cc
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	raws, err := encodeRequests(names)
	if err != nil {
		return row{}, err
	}
	// call makes one call; wctx is the worker's context, whose deadline
	// is the end of the phase plus 10 s.
	call := func(wctx context.Context, cc *grpc.ClientConn, cl rlsv3.RateLimitServiceClient, rnd *rand.Rand) (bool, error) {
		i := rnd.IntN(keys)
		if client == "lean" {
			var rep codeReply
			if err := cc.Invoke(wctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &raws[i], &rep); err != nil {
				return false, err
			}
			return rep.code == rlsv3.RateLimitResponse_OK, nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := cl.ShouldRateLimit(cctx, request(names[i]))
		if err != nil {
			return false, err
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}
	phase := func(d time.Duration, record bool) (row, error) {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			lats  []time.Duration
			r     row
			first error
		)
		stop := time.Now().Add(d)
		for w := range c {
			wg.Go(func() {
				cc := conns[w%len(conns)]
				cl := rlsv3.NewRateLimitServiceClient(cc)
				wctx, cancel := context.WithDeadline(ctx, stop.Add(10*time.Second))
				defer cancel()
				rnd := rand.New(rand.NewPCG(uint64(w), 42))
				local := make([]time.Duration, 0, 4096)
				var n, errs, ok int64
				var err1 error
				for time.Now().Before(stop) {
					t0 := time.Now()
					good, err := call(wctx, cc, cl, rnd)
					local = append(local, time.Since(t0))
					n++
					if err != nil {
						errs++
						if err1 == nil {
							err1 = err
						}
					} else if good {
						ok++
					}
				}
				mu.Lock()
				lats = append(lats, local...)
				r.n += n
				r.errs += errs
				r.overallOK += ok
				if first == nil {
					first = err1
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		if !record {
			return r, nil
		}
		if r.errs > 0 {
			return r, fmt.Errorf("%d of %d calls failed, first: %w", r.errs, r.n, first)
		}
		slices.Sort(lats)
		r.p50 = lats[len(lats)/2]
		r.p99 = lats[len(lats)*99/100]
		return r, nil
	}
	if _, err := phase(min(time.Second, o.duration/2), false); err != nil {
		return row{}, err
	}
	cpu0, err := harness.CPUTime(p.Cmd.Process.Pid)
	if err != nil {
		return row{}, err
	}
	var rcpu0 time.Duration
	if redisP != nil {
		if rcpu0, err = harness.CPUTime(redisP.Cmd.Process.Pid); err != nil {
			return row{}, err
		}
	}
	self0 := harness.SelfCPU()
	var calls0, cmds0 int64
	if redisAddr != "" {
		if calls0, cmds0, err = harness.RedisCalls(redisAddr); err != nil {
			return row{}, err
		}
	}
	t0 := time.Now()
	r, err := phase(o.duration, true)
	elapsed := time.Since(t0)
	self1 := harness.SelfCPU()
	if err != nil {
		return r, err
	}
	cpu1, err := harness.CPUTime(p.Cmd.Process.Pid)
	if err != nil {
		return row{}, err
	}
	r.conc, r.keys = c, keys
	r.rate = float64(r.n) / elapsed.Seconds()
	r.cpu = (cpu1 - cpu0) / time.Duration(r.n)
	r.clientCPU = (self1 - self0) / time.Duration(r.n)
	r.redisCmds, r.redisCalls, r.redisCPU = -1, -1, -1
	if redisP != nil {
		rcpu1, err := harness.CPUTime(redisP.Cmd.Process.Pid)
		if err != nil {
			return row{}, err
		}
		r.redisCPU = (rcpu1 - rcpu0) / time.Duration(r.n)
	}
	if redisAddr != "" {
		calls1, cmds1, err := harness.RedisCalls(redisAddr)
		if err != nil {
			return row{}, err
		}
		r.redisCalls = float64(calls1-calls0) / float64(r.n)
		r.redisCmds = float64(cmds1-cmds0-2) / float64(r.n) // -2: our own INFO calls
	}
	if r.overallOK != r.n {
		return r, fmt.Errorf("%d of %d answers were not OK: the limit should admit everything", r.n-r.overallOK, r.n)
	}
	return r, nil
}
