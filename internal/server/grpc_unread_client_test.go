package server_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

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
	// UnreadTimeout is long here: the backlog of a reading client drains
	// in milliseconds, but under -race on a loaded machine the client's
	// reads of two rounds of large answers took past the default 10 s,
	// and that is the clock this test is not about.
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{headers: true, grpc: server.GRPCOptions{MaxCalls: 10_000, UnreadTimeout: 5 * time.Minute}})
	req := largeRequest()
	for _, c := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"default windows", nil},
		{"64 KiB windows", []grpc.DialOption{grpc.WithInitialWindowSize(1<<16 - 1), grpc.WithInitialConnWindowSize(1<<16 - 1)}},
	} {
		const rounds = 2
		if failed, err := readAnswers(t, env, c.opts, req, server.DefaultMaxConcurrentStreams, rounds); failed != 0 {
			t.Errorf("%s: %d of %d calls failed (%v), want none", c.name, failed, rounds*server.DefaultMaxConcurrentStreams, err)
		}
	}
	if got := env.grpc.ClosedUnread(); got != 0 {
		t.Errorf("ClosedUnread() = %d after clients that read every answer, want 0", got)
	}
}

// largeRequest is a rate limit request of server.MaxDescriptors
// descriptors, whose answer (with headers) is large.
func largeRequest() *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "web"}
	for i := range server.MaxDescriptors {
		req.Descriptors = append(req.Descriptors, desc("user", "u"+strconv.Itoa(i)))
	}
	return req
}

// readAnswers opens a grpc-go client of env with opts, from which each of
// callers goroutines makes rounds calls of req, reading every answer; it
// returns the calls that failed and the last error.
func readAnswers(t *testing.T, env *rlsEnv, opts []grpc.DialOption, req *rlsv3.RateLimitRequest, callers, rounds int) (int, error) {
	t.Helper()
	conn, err := grpc.NewClient(env.conn.Target(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var lastErr error
	for range callers {
		wg.Go(func() {
			for range rounds {
				if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
					mu.Lock()
					failed++
					lastErr = err
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed, lastErr
}
