package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// simTrace writes a random trace: n requests over a few keys, times rising
// by nothing, a few µs, up to a period, or several seconds; costs 0 to
// Burst+2, mostly 1.
func simTrace(rng *rand.Rand, n int, l sluice.Limit) string {
	var b strings.Builder
	b.WriteString("# random trace\n")
	us := int64(1_700_000_000_000_000) + rng.Int64N(1e12)
	per := max(int64(l.Period/time.Microsecond)/l.Rate, 1)
	for range n {
		switch x := rng.IntN(20); {
		case x < 4:
		case x < 9:
			us += rng.Int64N(100) + 1
		case x < 17:
			us += rng.Int64N(3*per) + 1
		case x < 19:
			us += rng.Int64N(2*int64(l.Period/time.Microsecond)) + 1
		default:
			us += rng.Int64N(10_000_000) + 1
		}
		cost := int64(1)
		if rng.IntN(3) == 0 {
			cost = rng.Int64N(l.BurstOrRate() + 3)
		}
		fmt.Fprintf(&b, "%s,k%d,%d\n", sim.FormatTime(us), rng.IntN(4), cost)
	}
	return b.String()
}

// TestSimulateRedisEqualsMemory replays long random traces through
// internal/sim (the engine of `sluice simulate`) with the memory store and
// with the Redis store on a real redis-server, using the trace's times, and
// requires byte-identical output for every algorithm.
func TestSimulateRedisEqualsMemory(t *testing.T) {
	srv := redistest.StartServer(t)
	seed := sluicetest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	limits := []sluice.Limit{
		sluice.PerSecond(3),
		sluice.Every(7, 1500*time.Millisecond).WithBurst(4),
		sluice.PerMinute(20).WithSegments(6),
	}
	ctx := context.Background()
	for _, alg := range sluice.Algorithms() {
		for _, l := range limits {
			if l.Burst != 0 && !alg.TakesBurst() {
				continue // a window takes no burst
			}
			trace := simTrace(rng, 2500, l)
			name := fmt.Sprintf("%v %v burst %d segments %d", alg, l, l.Burst, l.Segments)
			var mem, red bytes.Buffer
			if _, err := sim.Run(ctx, sim.Options{Algorithm: alg, Limit: l, Store: memstore.New(memstore.Options{})}, strings.NewReader(trace), "trace", &mem); err != nil {
				t.Fatalf("%s: sim with memstore: %v", name, err)
			}
			// A prefix of its own, so each run starts from clean keys.
			rs := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Prefix: fmt.Sprintf("sim:%d:", rng.Uint64())})
			if _, err := sim.Run(ctx, sim.Options{Algorithm: alg, Limit: l, Store: rs}, strings.NewReader(trace), "trace", &red); err != nil {
				t.Fatalf("%s: sim with redisstore: %v", name, err)
			}
			if mem.Len() < 2500*10 {
				t.Fatalf("%s: memory output is only %d bytes", name, mem.Len())
			}
			if !bytes.Equal(mem.Bytes(), red.Bytes()) {
				ml, rl := strings.Split(mem.String(), "\n"), strings.Split(red.String(), "\n")
				for i := range min(len(ml), len(rl)) {
					if ml[i] != rl[i] {
						t.Fatalf("%s: output line %d differs:\nmemory: %s\nredis:  %s", name, i+1, ml[i], rl[i])
					}
				}
				t.Fatalf("%s: outputs differ in length: memory %d lines, redis %d", name, len(ml), len(rl))
			}
		}
	}
}
