package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkFlatBatchRedisCPU is Redis' own CPU per decision in the batch
// script (flatbatch.go) and in the lone flat script, fixed window, on
// Redis' clock (as sluice serve runs): one op is one script call of n
// Takes on distinct keys, and redis-µs/decision is redis-server's
// used_cpu_user+used_cpu_sys (INFO cpu) over the run divided by the
// decisions. Redis shares the machine's cores with the daemon, so each µs
// here is one the daemon cannot use.
func BenchmarkFlatBatchRedisCPU(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	s, err := New(ctx, Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, RedisTime: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	alg := sluice.FixedWindow
	l := sluice.PerSecond(1_000_000_000)
	t, err := l.Ticks()
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"", strconv.FormatInt(t.Tick, 10), s.margin,
		strconv.FormatInt(t.Period, 10), strconv.FormatInt(t.Rate-1, 10), "1"}
	for _, n := range []int{1, 16} {
		b.Run("batch="+strconv.Itoa(n), func(b *testing.B) {
			keys := make([]string, n)
			all := make([]string, 0, n*len(args))
			for i := range keys {
				keys[i] = s.opts.Prefix + "bench:" + strconv.Itoa(i)
				all = append(all, args...)
			}
			script := s.flatBatch[alg]
			if n == 1 {
				script = s.flat[alg]
			}
			cpu0 := redisCPU(b, s.c)
			for b.Loop() {
				if err := script.Exec(ctx, s.c, keys, all).Error(); err != nil {
					b.Fatal(err)
				}
			}
			cpu1 := redisCPU(b, s.c)
			b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(b.N*n), "redis-µs/decision")
		})
	}
}

// redisCPU is redis-server's used CPU (user + system) from INFO cpu.
func redisCPU(tb testing.TB, c rueidis.Client) time.Duration {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(line, ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %q", line)
			}
			total += time.Duration(f * float64(time.Second))
		}
	}
	return total
}
