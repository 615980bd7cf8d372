package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestClientGoneOnRedis: a request whose client hung up before Redis
// answered (its context ended: Redis refuses the call) is no store
// failure on any of the decision paths, under on_error allow: /v1/check,
// /v1/report, /v1/forward-auth and POST /json answer 499 (nginx's "client
// closed request", for the logs: nobody reads it) instead of "allowed" or
// store_unavailable, the Envoy service answers CANCELLED instead of OK, and
// sluice_store_errors_total and the fallback count stay at 0.
func TestClientGoneOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	f := start(t, st, "allow", nil)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/check", `{"rule":"api","key":"k"}`},
		{"POST", "/v1/check", `{"rule":"watch","key":"k"}`},
		{"POST", "/v1/report", `{"rule":"api","key":"k","cost":2}`},
		{"GET", "/v1/forward-auth", ""},
	} {
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body)).WithContext(gone)
		r.Header.Set("X-Forwarded-Uri", "/x")
		r.Header.Set("X-Api-Key", "k")
		w := httptest.NewRecorder()
		f.srv.Config.Handler.ServeHTTP(w, r)
		if w.Code != 499 || !strings.Contains(w.Body.String(), `"client_closed_request"`) {
			t.Errorf("%s %s %s for a gone client: %d %q; want 499 client_closed_request", c.method, c.path, c.body, w.Code, w.Body)
		}
	}
	if m := metricstest.Gather(t, f.reg); m["sluice_store_errors_total"] != 0 || m[`sluice_store_fallback_total{policy="allow"}`] != 0 {
		t.Errorf("decision API after gone clients: store errors %v, fallbacks %v; want 0", m["sluice_store_errors_total"], m[`sluice_store_fallback_total{policy="allow"}`])
	}
	if status, cr := check(t, f, `{"rule":"api","key":"k"}`); status != 200 || cr.Remaining != 2 {
		t.Errorf("check of a live client after gone ones: %d %+v; want 200, 2 left (the gone ones counted nothing)", status, cr)
	}

	set, err := descriptors.Parse("d.yaml", []byte("domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := startRLS(t, st, set, envOpts{onError: "allow"})
	req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("user", "dee")}}
	if resp, err := env.rls.ShouldRateLimit(gone, req); status.Code(err) != codes.Canceled {
		t.Errorf("ShouldRateLimit for a gone client: %v %v; want CANCELLED", resp, err)
	}
	r := httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"dee"}]}]}`)).WithContext(gone)
	w := httptest.NewRecorder()
	env.http.Config.Handler.ServeHTTP(w, r)
	if w.Code != 499 || !strings.Contains(w.Body.String(), `"client_closed_request"`) {
		t.Errorf("POST /json for a gone client: %d %q; want 499 client_closed_request", w.Code, w.Body)
	}
	if m := metricstest.Gather(t, env.reg); m["sluice_store_errors_total"] != 0 || m[`sluice_store_fallback_total{policy="allow"}`] != 0 {
		t.Errorf("Envoy service after gone clients: store errors %v, fallbacks %v; want 0", m["sluice_store_errors_total"], m[`sluice_store_fallback_total{policy="allow"}`])
	}
}
