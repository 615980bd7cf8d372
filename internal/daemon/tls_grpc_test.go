package daemon

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestGRPCTLSWithoutALPN: Envoy's TLS to an upstream cluster offers no
// ALPN unless the cluster's UpstreamTlsContext lists alpn_protocols, and
// speaks HTTP/2 anyway (the cluster is HTTP/2). The gRPC listener answers
// it, with mutual TLS and client names enforced as with ALPN.
func TestGRPCTLSWithoutALPN(t *testing.T) {
	td := startTLSDaemon(t)
	ask := func(alpn []string, certs ...tls.Certificate) (*rlsv3.RateLimitResponse, error) {
		cfg := td.ca.ClientConfig(certs...)
		cfg.NextProtos = alpn
		dial := func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		}
		conn, err := grpc.NewClient("passthrough:///"+td.d.Addrs().GRPC, grpc.WithContextDialer(dial),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
	}
	for _, alpn := range [][]string{nil, {"h2"}} {
		if r, err := ask(alpn, td.good.TLS); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("gRPC over TLS offering ALPN %q with an allowed client certificate: %v %v, want OK", alpn, r, err)
		}
		if _, err := ask(alpn, td.bad.TLS); err == nil {
			t.Errorf("gRPC over TLS offering ALPN %q with a client name not allowed: answered, want refused", alpn)
		}
		if _, err := ask(alpn); err == nil {
			t.Errorf("gRPC over TLS offering ALPN %q without a client certificate: answered, want refused", alpn)
		}
	}
}
