package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/memstore"
)

// heldStore holds every call made while hold is set (but for the first
// pass of them) until the call's context ends, telling entered as each
// begins, then refuses it as the Redis store refuses a caller that went
// away. The other calls go to the memory store.
type heldStore struct {
	*memstore.Store
	hold    atomic.Bool
	pass    atomic.Int32
	entered chan struct{}
}

func (s *heldStore) holds() bool {
	return s.hold.Load() && s.pass.Add(-1) < 0
}

func (s *heldStore) held(ctx context.Context) error {
	s.entered <- struct{}{}
	<-ctx.Done()
	return fmt.Errorf("held: %w: %w", sluice.ErrStoreUnavailable, ctx.Err())
}

func (s *heldStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.holds() {
		return sluice.Decision{}, s.held(ctx)
	}
	return s.Store.Take(ctx, r)
}

func (s *heldStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if s.holds() {
		return s.held(ctx)
	}
	return s.Store.TakeAll(ctx, rs, ds)
}

func (s *heldStore) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.holds() {
		return sluice.Decision{}, s.held(ctx)
	}
	return s.Store.Refund(ctx, r)
}

// TestEnvoyClientGoneMetrics: an Envoy caller that cancels its call while
// the store decides it (over a real gRPC listener, and on POST /json over
// a real HTTP listener) is counted once under each rule of its request in
// sluice_clients_gone_total{stage="decision"}, the rule named
// envoy/DOMAIN/PATH as in the other rule metrics, and in none of the
// sluice_envoy_* counters: nothing was decided, so none of its hits is
// over the limit, admitted or given back, but for a report's, charged
// before it left.
func TestEnvoyClientGoneMetrics(t *testing.T) {
	set, err := descriptors.Parse("d.yaml", []byte(`domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    value: free
    rate_limit: {unlimited: true}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: spend
    report: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := &heldStore{Store: memstore.New(memstore.Options{}), entered: make(chan struct{}, 1)}
	env := startRLS(t, st, set, envOpts{onError: "deny"})
	// Two tokens taken, so that a refund has something to give back.
	env.call(t, "web", 0, withHits(desc("tokens", "t"), 2))

	st.hold.Store(true)
	// Over gRPC: two descriptors of one rule, and an unlimited one; hits
	// to give back; a report, charged before the store held the others.
	reqs := []struct {
		pass int32
		req  *rlsv3.RateLimitRequest
	}{
		{0, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("user", "dee"), desc("plan", "free"), desc("user", "eve")}}},
		{0, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{withNegative(withHits(desc("tokens", "t"), 2))}}},
		{1, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{withHits(desc("spend", "s"), 3), desc("user", "zed")}}},
	}
	for _, c := range reqs {
		st.pass.Store(c.pass)
		req := c.req
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := env.client.ShouldRateLimit(ctx, req)
			errc <- err
		}()
		<-st.entered
		cancel()
		if err := <-errc; status.Code(err) != codes.Canceled {
			t.Errorf("ShouldRateLimit cancelled while the store decided: %v; want CANCELLED", err)
		}
	}
	st.hold.Store(false)
	if n := env.remaining(t, "web", "spend", "s"); n != 7 {
		t.Errorf("the report charged before its client left: %d remaining, want 7", n)
	}
	st.hold.Store(true)
	// And over POST /json.
	ctx, cancel := context.WithCancel(context.Background())
	r, err := http.NewRequestWithContext(ctx, "POST", env.http.URL+"/json", strings.NewReader(`{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"dee"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := env.http.Client().Do(r)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-st.entered
	cancel()
	if err := <-errc; err == nil {
		t.Errorf("POST /json cancelled while the store decided: answered")
	}
	// Every call in flight has returned once both servers have stopped.
	env.stop()
	env.http.Close()

	got := metricstest.Gather(t, env.reg)
	wantCounts(t, "Envoy callers gone while the store decided", got, map[string]float64{
		`sluice_clients_gone_total{rule="envoy/web/user",stage="decision"}`:      3,
		`sluice_clients_gone_total{rule="envoy/web/spend",stage="decision"}`:     1,
		`sluice_envoy_hits_total{descriptor="spend",domain="web"}`:               3,
		`sluice_clients_gone_total{rule="envoy/web/plan_free",stage="decision"}`: 1,
		`sluice_clients_gone_total{rule="envoy/web/tokens",stage="decision"}`:    1,
		`sluice_envoy_hits_total{descriptor="user",domain="web"}`:                0,
		`sluice_envoy_over_limit_total{descriptor="user",domain="web"}`:          0,
		`sluice_envoy_hits_total{descriptor="plan_free",domain="web"}`:           0,
		`sluice_envoy_negative_hits_total{descriptor="tokens",domain="web"}`:     0,
		`sluice_store_errors_total`:                                              0,
	})
	for k := range got {
		if strings.HasPrefix(k, "sluice_clients_gone_total") && strings.Contains(k, `stage="held"`) && got[k] != 0 {
			t.Errorf("%s = %v: the Envoy service holds no call", k, got[k])
		}
	}
}

func withNegative(d *descriptorPB) *descriptorPB {
	d.IsNegativeHits = true
	return d
}

// wantCounts checks the series of got named in want (absent counts 0).
func wantCounts(t *testing.T, what string, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v, want %v", what, k, got[k], v)
		}
	}
}
