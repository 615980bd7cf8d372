package server_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// TestGRPCUnreadSmallWindows: a grpc-go client that reads its answers as
// they come keeps its connection with DefaultMaxConcurrentStreams calls
// in flight whose answers are large (64 descriptors, headers), with
// grpc-go's default windows (64 KiB until its estimate grows them) or
// the smallest HTTP/2 allows, fixed: its connection window is used up
// and topped up over and over, and answers wait for it a moment each
// time, often more than MaxUnreadAnswers of them. That is flow control,
// not a client that does not read; closing at once when they were more,
// the listener cut the clients' connections and failed 9 calls in 10.
func TestGRPCUnreadSmallWindows(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{headers: true, grpc: server.GRPCOptions{MaxCalls: 10_000}})
	req := &rlsv3.RateLimitRequest{Domain: "web"}
	for i := range server.MaxDescriptors {
		req.Descriptors = append(req.Descriptors, desc("user", "u"+strconv.Itoa(i)))
	}
	for _, c := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"default windows", nil},
		{"64 KiB windows", []grpc.DialOption{grpc.WithInitialWindowSize(1<<16 - 1), grpc.WithInitialConnWindowSize(1<<16 - 1)}},
	} {
		conn, err := grpc.NewClient(env.conn.Target(), append(c.opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		client := rlsv3.NewRateLimitServiceClient(conn)
		const rounds = 2
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed int
		var firstErr error
		for range server.DefaultMaxConcurrentStreams {
			wg.Go(func() {
				for range rounds {
					if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
						mu.Lock()
						failed++
						firstErr = err
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		conn.Close()
		if failed != 0 {
			t.Errorf("%s: %d of %d calls failed (%v), want none", c.name, failed, rounds*server.DefaultMaxConcurrentStreams, firstErr)
		}
	}
	if got := env.grpc.ClosedUnread(); got != 0 {
		t.Errorf("ClosedUnread() = %d after clients that read every answer, want 0", got)
	}
}
