package server_test

import (
	"context"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestEnvoyCancelMidCallOnRedis: Envoy cancels calls while Redis holds
// them (their script written, not yet run), over a real gRPC listener.
// Each fails CANCELLED. The store waits for an answer under way (within
// its timeout), so each is decided when Redis runs it late: counted once
// (nothing sends it again), in Redis and in sluice_envoy_hits_total, not
// as a client gone nor as a store error; the service answers the next
// call as usual; and no goroutine is left behind.
func TestEnvoyCancelMidCallOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	hold := redistest.NewHolder(t, srv.Addr, "held-dee")
	st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{hold.Addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e := startRLS(t, st, writeConf(t, plainConf), envOpts{})
	e.expect(t, "before", []string{"O:O"}, "web", desc("global", "warm"))
	settle := func() int {
		runtime.GC()
		return runtime.NumGoroutine()
	}
	base := settle()

	const rounds = 5
	req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("global", "held-dee")}}
	for i := range rounds {
		hold.Hold()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := e.client.ShouldRateLimit(ctx, req)
			errc <- err
		}()
		<-hold.Held() // the call's script is on its way to Redis
		cancel()
		if err := <-errc; status.Code(err) != codes.Canceled {
			t.Errorf("round %d: a call cancelled while Redis held it: %v, want CANCELLED", i, err)
		}
		if n := hold.Release(); n != 1 {
			t.Errorf("round %d: %d writes held, want 1", i, n)
		}
	}
	if got := e.remaining(t, "web", "global", "held-dee"); got != 100-rounds {
		t.Errorf("after %d cancelled calls: %d of 100 left, want %d (each run late, counted once)", rounds, got, 100-rounds)
	}
	e.expect(t, "after", []string{"O:O"}, "web", desc("global", "after"))
	m := metricstest.Gather(t, e.reg)
	// Redis answered within its timeout: each call was decided (the
	// store waits for an answer under way rather than leave it), so its
	// hits count as any decided call's, and it is no client gone.
	if got := m[`sluice_envoy_hits_total{descriptor="global",domain="web"}`]; got != rounds+2 {
		t.Errorf("sluice_envoy_hits_total{global} = %v, want %d (the cancelled calls, decided, and the two others)", got, rounds+2)
	}
	if got := m[`sluice_clients_gone_total{rule="envoy/web/global",stage="decision"}`]; got != 0 {
		t.Errorf("sluice_clients_gone_total{envoy/web/global} = %v, want 0 (Redis answered each)", got)
	}
	if got := m["sluice_store_errors_total"]; got != 0 {
		t.Errorf("sluice_store_errors_total = %v, want 0 (a client gone is no store failure)", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for settle() > base {
		if time.Now().After(deadline) {
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines after %d cancelled calls, want at most %d (before them):\n%s", runtime.NumGoroutine(), rounds, base, b.String())
		}
		time.Sleep(5 * time.Millisecond) // polling for the count to come down
	}
}

// TestDeadlinePassedBeforeAsked: a call whose deadline passed before the
// store was asked (it waited for a CPU in a Sluice short of them) is a
// store failure on Redis, as one whose deadline passes while Redis
// answers: answered as on_error says, counted in sluice_store_errors_total,
// nothing counted in Redis. On memory it is decided and counted.
func TestDeadlinePassedBeforeAsked(t *testing.T) {
	for _, tc := range []struct {
		kind              string
		errors, remaining float64
	}{{"redis", 1, 2}, {"memory", 0, 1}} {
		e := startRLS(t, newStore(t, tc.kind), writeConf(t, plainConf), envOpts{})
		late, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
		resp, err := e.rls.ShouldRateLimit(late, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("user", "a")}})
		cancel()
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("%s: a call past its deadline: %v %v, want OK (on_error allow)", tc.kind, resp, err)
		}
		if got := float64(e.remaining(t, "web", "user", "a")); got != tc.remaining {
			t.Errorf("%s: %v of 2 left after it, want %v", tc.kind, got, tc.remaining)
		}
		if got := counterValue(t, e, "sluice_store_errors_total"); got != tc.errors {
			t.Errorf("%s: sluice_store_errors_total = %v, want %v", tc.kind, got, tc.errors)
		}
	}
}
