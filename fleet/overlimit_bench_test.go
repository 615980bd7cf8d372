package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// BenchmarkOverLimitRefused compares the cost of refusing a key that is
// over its limit: a Redis round trip (plain) against the cache's answer
// (cached; cached-storeclock as the daemon runs it, which reads the
// monotonic clock too), from parallel goroutines on one hot key.
//
//	go test -run '^$' -bench OverLimitRefused -benchmem -benchtime 2s ./fleet/
func BenchmarkOverLimitRefused(b *testing.B) {
	srv := redistest.StartServer(b)
	rs := fleet.OpenRedis(b, redisstore.Options{Addrs: []string{srv.Addr}, RedisTime: true})
	for _, tc := range []struct {
		name  string
		store sluice.Store
	}{
		{"plain", rs},
		{"cached", fleet.NewOverLimitCache(rs, fleet.OverLimitOptions{})},
		// As the daemon runs it: refusals end by the monotonic clock too.
		{"cached-storeclock", fleet.NewOverLimitCache(rs, fleet.OverLimitOptions{StoreClock: true})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			r := sluice.Request{Key: "hot/" + tc.name, Algorithm: sluice.GCRA, Limit: sluice.PerHour(1), Cost: 1, Now: time.Now()}
			tc.store.Take(ctx, r)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := r
				for pb.Next() {
					r.Now = time.Now()
					d, err := tc.store.Take(ctx, r)
					if err != nil || d.Allowed {
						b.Errorf("Take = %+v, %v; want refused", d, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkOverLimitOverload offers each of 8 keys ten times its limit
// (100/s, in the requests' own time, one client per key) and reports how
// many Redis scripts each decision costs, plain and through the cache, per
// algorithm. Both admit exactly the same requests: the limit, plus the
// first burst, so about 0.11 of them over 10 s of the requests' time.
//
//	go test -run '^$' -bench OverLimitOverload -benchtime 80000x ./fleet/
func BenchmarkOverLimitOverload(b *testing.B) {
	srv := redistest.StartServer(b)
	rs := fleet.OpenRedis(b, redisstore.Options{Addrs: []string{srv.Addr}})
	const keys = 8
	l := sluice.PerSecond(100)
	step := time.Duration(int64(l.Period) / l.Rate / 10) // 10× the rate
	for _, alg := range sluice.Algorithms() {
		for _, cached := range []bool{false, true} {
			name := alg.String() + "/plain"
			if cached {
				name = alg.String() + "/cached"
			}
			b.Run(name, func(b *testing.B) {
				counted := &countingStore{Store: rs}
				var s sluice.Store = counted
				if cached {
					s = fleet.NewOverLimitCache(counted, fleet.OverLimitOptions{})
				}
				run := time.Now().UnixNano()
				var (
					wg      sync.WaitGroup
					mu      sync.Mutex
					allowed int
				)
				per := b.N / keys
				b.ResetTimer()
				for k := range keys {
					wg.Go(func() {
						ctx := context.Background()
						r := sluice.Request{Key: fmt.Sprintf("over/%d/%d", run, k), Algorithm: alg, Limit: l, Cost: 1}
						n := 0
						for i := range per {
							r.Now = sluicetest.T0.Add(time.Duration(i) * step)
							d, err := s.Take(ctx, r)
							if err != nil {
								b.Error(err)
								return
							}
							if d.Allowed {
								n++
							}
						}
						mu.Lock()
						allowed += n
						mu.Unlock()
					})
				}
				wg.Wait()
				b.StopTimer()
				total := float64(per * keys)
				b.ReportMetric(float64(counted.calls())/total, "scripts/decision")
				b.ReportMetric(float64(allowed)/total, "admitted/decision")
			})
		}
	}
}
