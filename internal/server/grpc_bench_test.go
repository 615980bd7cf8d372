package server_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/benchutil"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkGRPCLoopback is a decision through the gRPC listener over
// loopback, as an Envoy worker makes it: one connection, 8 calls in
// flight, 1,000 keys on the memory store, every call admitted. It is the
// well-behaved client's cost of what the listener adds around the
// service (BenchmarkShouldRateLimit): gRPC, HTTP/2 and the listener's
// own bounds, the daemon's connection wrapper (listener.Wrap, with its
// send timeout) included.
func BenchmarkGRPCLoopback(b *testing.B) {
	set := writeConf(b, "domain: bench\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")
	env := startRLS(b, memstore.New(memstore.Options{}), set, envOpts{
		listen: func(ln net.Listener, m *metrics.Metrics) net.Listener {
			return listener.Wrap(ln, listener.DefaultMaxConnections, server.DefaultSendTimeout, m.Listener("grpc"))
		},
	})
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{desc("key", "k"+strconv.Itoa(i))}}
	}
	var next atomic.Int64
	b.ReportAllocs()
	defer benchutil.ReportCPU(b)()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := env.client.ShouldRateLimit(context.Background(), reqs[next.Add(1)%int64(len(reqs))])
			if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Errorf("ShouldRateLimit: %v %v", r, err)
				return
			}
		}
	})
}
