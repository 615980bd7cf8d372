package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// checkLua makes wrk POST /v1/check over 1,000 keys, preformatted in init
// so the generator spends no time building requests.
const checkLua = `
local reqs = {}
local n = 0
init = function(args)
  for i = 1, 1000 do
    local body = '{"rule":"bench","key":"user-' .. i .. '","cost":1}'
    reqs[i] = wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
  end
end
request = function()
  n = n % 1000 + 1
  return reqs[n]
end
`

type result struct {
	name          string
	rps           float64
	requests      int64
	p50, p99      time.Duration
	non2xx        int64
	cpuPerRequest time.Duration // server CPU (utime+stime) per request
	redisCPU      time.Duration // the Redis server's CPU per request, -1 if the server uses none
}

// wrk runs one closed-loop step and reads the server's CPU time around it,
// and that of the Redis it uses (nil if none).
func wrk(ctx context.Context, o options, url, script string, server, redis *harness.Proc) (result, error) {
	ps := []*harness.Proc{server}
	if redis != nil {
		ps = append(ps, redis)
	}
	w, err := harness.Wrk(ctx, o.threads, o.conns, o.duration, url, script, ps...)
	return fromWrk(w), err
}

// paced sends GET / to addr open loop at rate requests/s (harness.Paced).
func paced(ctx context.Context, o options, addr string, rate float64, server *harness.Proc) (result, error) {
	p, err := harness.Paced(ctx, harness.PacedOptions{Addr: addr, Request: harness.GetRequest(addr, "/"), Rate: rate, Duration: o.duration}, server)
	if err != nil && !errors.Is(err, harness.ErrShortfall) {
		return result{}, err
	}
	if p.Errors > 0 {
		return result{}, fmt.Errorf("%s: %d of %d paced requests failed: %v", addr, p.Errors, p.Sent, p.FirstErr)
	}
	return result{rps: p.Achieved, requests: p.Answered, p50: p.P50, p99: p.P99, non2xx: p.Non2xx, cpuPerRequest: p.ServerCPU[0], redisCPU: -1}, err
}

func fromWrk(w harness.WrkResult) result {
	r := result{rps: w.RPS, requests: w.Requests, p50: w.P50, p99: w.P99, non2xx: w.Non2xx, redisCPU: -1}
	if len(w.CPUPerRequest) > 0 {
		r.cpuPerRequest = w.CPUPerRequest[0]
	}
	if len(w.CPUPerRequest) > 1 {
		r.redisCPU = w.CPUPerRequest[1]
	}
	return r
}
