package server_test

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestGRPCCallsStreaming: calls other than the rate limit service's
// (health's Watch, reflection), which count toward MaxCalls while they
// last, take at most half of it: a client holding health Watch calls
// open, reading every status, gets the 11th of MaxCalls 20 refused, and
// rate limit calls are still served. They could take all of it: 1,000
// Watch calls from one client (one connection carries 1,000 calls) had
// every rate limit call of the listener refused with RESOURCE_EXHAUSTED
// until they ended, which they need never do.
func TestGRPCCallsStreaming(t *testing.T) {
	const max = 20
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{grpc: server.GRPCOptions{MaxCalls: max}})
	conn, err := grpc.NewClient(env.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watches := 0
	for ; watches < max; watches++ {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("Watch call %d: %v, want its status or RESOURCE_EXHAUSTED", watches+1, err)
			}
			break
		}
	}
	if watches != max/2 {
		t.Errorf("%d Watch calls held open with MaxCalls %d, want %d", watches, max, max/2)
	}
	for i := range max {
		resp, err := env.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("global", "x")}})
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("rate limit call %d while %d Watch calls are open: %v, %v; want answered", i+1, watches, resp, err)
		}
	}
}
