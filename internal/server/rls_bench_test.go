package server_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/server"
)

// BenchmarkShouldRateLimit is the service's own cost per decision, without
// gRPC: matching, the store, the response. One descriptor, 10,000 keys,
// every request admitted. The gRPC load run (bench/grpcload) measures the
// whole path.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			st := newStore(b, kind)
			set := writeConf(b, "domain: bench\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")
			m := metrics.New(prometheus.NewRegistry())
			eng, err := engine.New(engine.Options{Store: st, Metrics: m})
			if err != nil {
				b.Fatal(err)
			}
			rls, err := server.NewRLS(server.RLSOptions{Engine: func() *engine.Engine { return eng }, Descriptors: func() *descriptors.Set { return set }, Metrics: m})
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([]*rlsv3.RateLimitRequest, 10000)
			for i := range reqs {
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{desc("key", "k"+strconv.Itoa(i))}}
			}
			var next atomic.Int64
			if kind == "redis" {
				b.SetParallelism(32) // requests in flight, as from a gateway
			}
			b.ReportAllocs()
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, err := rls.ShouldRateLimit(context.Background(), reqs[next.Add(1)%int64(len(reqs))])
					if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("ShouldRateLimit: %v %v", r, err)
						return
					}
				}
			})
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime)-syscall.TimevalToNsec(ru0.Utime)) + time.Duration(syscall.TimevalToNsec(ru1.Stime)-syscall.TimevalToNsec(ru0.Stime))
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
