package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

const plainConf = `domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: global
    rate_limit: {unit: minute, requests_per_unit: 100}
`

func postJSON(t *testing.T, e *rlsEnv, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(e.http.URL+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("POST /json answered %d with non-JSON %q", resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

func TestJSONEndpoint(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	req := `{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"ann"}]},{"entries":[{"key":"global","value":"g"}]}]}`
	for i, want := range []int{200, 200, 429} {
		code, m := postJSON(t, e, req)
		if code != want {
			t.Fatalf("POST /json #%d: %d %v, want %d", i+1, code, m, want)
		}
		if i == 2 {
			if m["overallCode"] != "OVER_LIMIT" {
				t.Errorf("429 body overallCode = %v, want OVER_LIMIT", m["overallCode"])
			}
			st := m["statuses"].([]any)
			if st[0].(map[string]any)["code"] != "OVER_LIMIT" || st[1].(map[string]any)["code"] != "OK" {
				t.Errorf("statuses = %v, want OVER_LIMIT then OK", st)
			}
		}
	}
	if got := e.remaining(t, "web", "global", "g"); got != 98 {
		t.Errorf("global remaining = %d, want 98 (the denied request counted nothing)", got)
	}
	for _, bad := range []string{`{`, `{"domain":"web"}`, `{"domain":"","descriptors":[{}]}`, `{"domain":"web","descriptors":[{"entries":[]}],"bogus":1}`} {
		if code, m := postJSON(t, e, bad); code != 400 || m["error"] == nil {
			t.Errorf("POST /json %s: %d %v, want 400 with an error", bad, code, m)
		}
	}
	resp, err := http.Get(e.http.URL + "/json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET /json: %d, want 405", resp.StatusCode)
	}
	big := `{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("x", 70<<10) + `"}]}]}`
	if code, _ := postJSON(t, e, big); code != 413 {
		t.Errorf("POST /json with a 70 KiB body: %d, want 413", code)
	}
}

func TestResponseHeaders(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{headers: true})
	hs := func(r *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	r := e.call(t, "web", 0, desc("user", "bo"), desc("global", "g"))
	h := hs(r)
	// tMid is 30s into the minute.
	want := map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "30",
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q (the tightest descriptor's); all: %v", k, h[k], v, h)
		}
	}
	if _, ok := h["Retry-After"]; ok {
		t.Errorf("Retry-After on an allowed answer")
	}
	e.call(t, "web", 0, desc("user", "bo"))
	r = e.call(t, "web", 0, desc("global", "g"), desc("user", "bo"))
	h = hs(r)
	if h["X-RateLimit-Retry-After"] != h["Retry-After"] {
		t.Errorf("over-limit X-RateLimit-Retry-After %q, want Retry-After's %q", h["X-RateLimit-Retry-After"], h["Retry-After"])
	}
	if h["Retry-After"] != "30" || h["RateLimit-Remaining"] != "0" || h["RateLimit-Limit"] != "2" {
		t.Errorf("over-limit headers = %v, want the user limit's, Retry-After 30", h)
	}
	r = e.call(t, "nowhere", 0, desc("a", "b"))
	if len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without any limit: %v", r.ResponseHeadersToAdd)
	}
}

func TestBadRequests(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	many := make([]*descriptorPB, server_MaxDescriptors+1)
	for i := range many {
		many[i] = desc("user", "x")
	}
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"empty domain":     {Descriptors: []*descriptorPB{desc("user", "x")}},
		"no descriptors":   {Domain: "web"},
		"too many":         {Domain: "web", Descriptors: many},
		"huge hits_addend": {Domain: "web", Descriptors: []*descriptorPB{withHits(desc("user", "x"), 1<<63)}},
	} {
		_, err := e.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

func TestHealthAndReflection(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := healthpb.NewHealthClient(e.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v, want SERVING", svc, r, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.Name == "envoy.service.ratelimit.v3.RateLimitService"
	}
	if !found {
		t.Errorf("reflection does not list the rate limit service: %v", resp)
	}
	stream.CloseSend()
}

func TestHotSwapKeepsCounters(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	e.expect(t, "before", []string{"O:O"}, "web", desc("user", "cy"))
	// Same limit, another descriptor added: the count carries over.
	e.set.put(writeConf(t, plainConf+"  - key: extra\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	e.expect(t, "after an unrelated change", []string{"O:O", "X:X"}, "web", desc("user", "cy"))
	e.expect(t, "the new descriptor", []string{"O:O", "X:X"}, "web", desc("extra", "1"))
	// A new limit starts a new counter.
	e.set.put(writeConf(t, strings.Replace(plainConf, "requests_per_unit: 2", "requests_per_unit: 3", 1)))
	e.expect(t, "after the limit changed", []string{"O:O", "O:O", "O:O", "X:X"}, "web", desc("user", "cy"))
}

// TestRedisDown: with Redis gone or hung, answers come within the store
// timeout, as on_error says, or UNAVAILABLE when so configured.
func TestRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	// 1s, not less: connecting (dial and handshake) is bounded by it too,
	// and a loaded machine can miss 100ms. A hung call still fails within
	// the check's deadline.
	st, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	set := writeConf(t, plainConf)
	allow := startRLS(t, st, set, envOpts{onError: "allow"})
	deny := startRLS(t, st, set, envOpts{onError: "deny"})
	unavail := startRLS(t, st, set, envOpts{onError: "allow", unavailable: true})
	allow.expect(t, "Redis up", []string{"O:O"}, "web", desc("user", "dee"))

	check := func(how string) {
		t.Helper()
		// A hung call would outlast this deadline by far; the store's
		// timeout is 1s.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("user", "dee")}}
		r, err := allow.client.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("%s, on_error allow: %v %v, want OK", how, r, err)
		}
		r, err = deny.client.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s, on_error deny: %v %v, want OVER_LIMIT", how, r, err)
		}
		_, err = unavail.client.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s, unavailable: %v, want UNAVAILABLE", how, err)
		}
		code, _ := postJSON(t, unavail, `{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"dee"}]}]}`)
		if code != 503 {
			t.Errorf("%s, POST /json unavailable: %d, want 503", how, code)
		}
	}
	// Hung: the process stops answering but keeps its socket.
	if err := syscall.Kill(srv.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	check("Redis hung")
	if err := syscall.Kill(srv.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	check("Redis gone")
}

// TestResponseHeadersNever: a request whose hits exceed what a token
// bucket can ever admit, on a key never seen (nothing to reset): over the
// limit, Retry-After must still be at least 1, as the HTTP edges answer
// (0 would invite an immediate retry).
func TestResponseHeadersNever(t *testing.T) {
	const conf = `domain: web
descriptors:
  - key: user
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, conf), envOpts{headers: true})
	r := e.call(t, "web", 3, desc("user", "never"))
	h := map[string]string{}
	for _, x := range r.ResponseHeadersToAdd {
		h[x.Key] = x.Value
	}
	if codesOf(r) != "X:X" || h["Retry-After"] != "1" || h["X-RateLimit-Retry-After"] != "1" {
		t.Errorf("3 hits against a bucket of 2, fresh key: %s with headers %v, want X:X and Retry-After 1", codesOf(r), h)
	}
}
