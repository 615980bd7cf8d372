package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/bench/internal/harness"
	"github.com/sluicehq/sluice/internal/server"
)

// bare answers every request OK at once.
type bare struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (bare) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

// serveBare runs the floor: grpc-go with its defaults, or with workers the
// server options Sluice adds for speed (its stream workers, its codec for
// Envoy's messages and fixed flow-control windows), so that a reader sees
// both ratios.
func serveBare(addr string, workers bool) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var opts []grpc.ServerOption
	if workers {
		opts = server.FastServerOptions()
	}
	s := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(s, bare{})
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const descriptors = `domain: bench
descriptors:
  - key: key
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// startReference runs Envoy's reference service on the descriptor file,
// configured (by environment, as it is) for the local Redis over TCP,
// without statsd, with its defaults otherwise.
func startReference(ctx context.Context, procs *harness.Procs, bin, dir, redisAddr, httpAddr, grpcAddr, debugAddr string) (*harness.Proc, error) {
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(descriptors), 0o644); err != nil {
		return nil, err
	}
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	p := &harness.Proc{Name: "reference", Logs: new(bytes.Buffer), Cmd: exec.CommandContext(ctx, bin)}
	p.Cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+port(httpAddr),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(grpcAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(debugAddr),
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
	)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the reference service: %w", err)
	}
	procs.Add(p)
	return p, nil
}
