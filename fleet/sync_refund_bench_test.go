package fleet_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkSyncRefund: decisions of one Sync (Interval 100ms) on one hot
// key over a real Redis, from parallel goroutines, with a refund of cost 1
// (Envoy's negative hits) every N decisions (N = 10, 100; 0: none). The
// limit (10⁹ a minute) is never reached. ns/op is per decision, its
// refunds included; refunds/op and scripts/op tell the mix and the round
// trips to Redis per decision.
//
//	go test ./fleet -run '^$' -bench BenchmarkSyncRefund -benchmem
func BenchmarkSyncRefund(b *testing.B) {
	srv := redistest.StartServer(b)
	rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow} {
		for _, every := range []int{0, 10, 100} {
			b.Run(fmt.Sprintf("%v/every=%d", alg, every), func(b *testing.B) {
				s, err := fleet.NewSync(rs, fleet.SyncOptions{Interval: 100 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				r := sluice.Request{Key: fmt.Sprintf("bench/%d/refund", time.Now().UnixNano()), Algorithm: alg, Limit: sluice.PerMinute(1_000_000_000), Cost: 1}
				ctx := context.Background()
				var refunds atomic.Int64
				before := evalCalls(b, srv.Addr)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					r := r
					for i := 1; pb.Next(); i++ {
						r.Now = time.Now()
						if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
							b.Errorf("Take: %+v, %v", d, err)
							return
						}
						if every > 0 && i%every == 0 {
							if _, err := s.Refund(ctx, r); err != nil {
								b.Errorf("Refund: %v", err)
								return
							}
							refunds.Add(1)
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(refunds.Load())/float64(b.N), "refunds/op")
				b.ReportMetric(float64(evalCalls(b, srv.Addr)-before)/float64(b.N), "scripts/op")
			})
		}
	}
}
