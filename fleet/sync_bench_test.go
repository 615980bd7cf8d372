package fleet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// redisCounters is what BenchmarkFleet reads of Redis around a run.
type redisCounters struct {
	cmds, scripts int64         // total_commands_processed; EVALSHA and EVAL calls
	cpu           time.Duration // Redis' CPU time
}

// redisReadINFOs is the INFO commands of one readRedis, which two
// readings are apart by in total_commands_processed: Redis counts a
// command once it has run, so a reading's own INFO stats (its first) is
// not in its figure, and its other two are in the next reading's.
const redisReadINFOs = 3

// readRedis reads Redis' counters, total_commands_processed first.
func readRedis(tb testing.TB, addr string) redisCounters {
	return redisCounters{cmds: commandsProcessed(tb, addr), scripts: evalCalls(tb, addr), cpu: redisCPU(tb, addr)}
}

// commandsProcessed is Redis' total_commands_processed (INFO stats).
func commandsProcessed(b testing.TB, addr string) int64 {
	info, err := redistest.Do(addr, "INFO", "stats")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no total_commands_processed in INFO stats")
	return 0
}

// redisCPU is Redis' CPU time (INFO cpu: used_cpu_user + used_cpu_sys).
func redisCPU(b testing.TB, addr string) time.Duration {
	info, err := redistest.Do(addr, "INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sec += f
		}
	}
	return time.Duration(sec * float64(time.Second))
}

// BenchmarkFleet: decisions through three instances' store stacks (each its
// own Redis client) on one redis-server, plain (one script per decision)
// vs sync: 100ms vs lease: auto, on one hot key and on 100,000 keys
// (uniformly random). The limit (fixed window, 10^9 per minute) is never
// reached: this is the cost of admitting. Besides ns/op it reports the
// scripts Redis ran per decision (EVALSHA and EVAL, INFO commandstats:
// round trips) and the commands it processed per decision (INFO stats,
// counting the GET and SET inside each script, less the INFO calls), and
// the CPU time per decision of the instances (this process) and of Redis.
//
//	go test ./fleet -run '^$' -bench BenchmarkFleet -benchtime 2s
func BenchmarkFleet(b *testing.B) {
	srv := redistest.StartServer(b)
	const n = 3
	lim := sluice.PerMinute(1_000_000_000)
	for _, mode := range []string{"plain", "sync", "lease"} {
		for _, keys := range []int{1, 100_000} {
			b.Run(fmt.Sprintf("%s/keys=%d", mode, keys), func(b *testing.B) {
				stores := make([]sluice.Store, n)
				for i := range stores {
					rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
					if err != nil {
						b.Fatal(err)
					}
					defer rs.Close()
					switch mode {
					case "plain":
						stores[i] = rs
					case "sync":
						s, err := fleet.NewSync(rs, fleet.SyncOptions{Interval: 100 * time.Millisecond})
						if err != nil {
							b.Fatal(err)
						}
						defer s.Close()
						stores[i] = s
					case "lease":
						l, err := fleet.NewLease(rs, fleet.LeaseOptions{})
						if err != nil {
							b.Fatal(err)
						}
						defer l.Close()
						stores[i] = l
					}
				}
				prefix := fmt.Sprintf("bench/%d/%s/", time.Now().UnixNano(), mode)
				names := make([]string, keys)
				for i := range names {
					names[i] = prefix + strconv.Itoa(i)
				}
				var worker atomic.Int64
				before := readRedis(b, srv.Addr)
				beforeCPU := benchutil.CPUTime()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					w := worker.Add(1)
					s := stores[w%n]
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					r := sluice.Request{Algorithm: sluice.FixedWindow, Limit: lim, Cost: 1}
					for pb.Next() {
						r.Key = names[rng.IntN(keys)]
						r.Now = time.Now()
						if d, err := s.Take(context.Background(), r); err != nil || !d.Allowed {
							b.Errorf("Take: %+v, %v", d, err)
							return
						}
					}
				})
				b.StopTimer()
				cpu := benchutil.CPUTime() - beforeCPU
				after := readRedis(b, srv.Addr)
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64((after.cpu-before.cpu).Nanoseconds())/float64(b.N), "redis-cpu-ns/op")
				b.ReportMetric(float64(after.scripts-before.scripts)/float64(b.N), "scripts/op")
				b.ReportMetric(float64(after.cmds-before.cmds-redisReadINFOs)/float64(b.N), "redis-cmds/op")
			})
		}
	}
}

// BenchmarkSyncHotBucket: local decisions of one Sync on one hot GCRA key,
// thousands per batch, so that nearly every hit is folded (see fold): what
// keeping a bucket's hits exact costs on the hot path.
//
//	go test ./fleet -run '^$' -bench BenchmarkSyncHotBucket -benchmem
func BenchmarkSyncHotBucket(b *testing.B) {
	hotGCRA(b, func(rs *redisstore.Store) (sluice.Store, func() error, error) {
		s, err := fleet.NewSync(rs, fleet.SyncOptions{Interval: 100 * time.Millisecond})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	})
}

// BenchmarkLeaseHot: local decisions of one Lease on one hot GCRA key, the
// units held covering thousands of them per reservation: the cost of
// spending a held unit.
//
//	go test ./fleet -run '^$' -bench BenchmarkLeaseHot -benchmem
func BenchmarkLeaseHot(b *testing.B) {
	hotGCRA(b, func(rs *redisstore.Store) (sluice.Store, func() error, error) {
		l, err := fleet.NewLease(rs, fleet.LeaseOptions{})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	})
}

// hotGCRA decides one hot GCRA key (10⁹ a minute: every request admitted)
// on the store newStore makes over a real Redis, from parallel goroutines.
func hotGCRA(b *testing.B, newStore func(*redisstore.Store) (sluice.Store, func() error, error)) {
	srv := redistest.StartServer(b)
	rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	s, closeStore, err := newStore(rs)
	if err != nil {
		b.Fatal(err)
	}
	defer closeStore()
	r := sluice.Request{Key: fmt.Sprintf("bench/%d/hot", time.Now().UnixNano()), Algorithm: sluice.GCRA, Limit: sluice.PerMinute(1_000_000_000), Cost: 1}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := r
		for pb.Next() {
			r.Now = time.Now()
			if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
				b.Fatalf("Take: %+v, %v", d, err)
			}
		}
	})
}
