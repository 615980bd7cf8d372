package server_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/memstore"
)

// Corners of the reference service's semantics that its README's examples
// do not show, each as the reference service answers it.

// TestReplacedUnlimitedStaysUnlimited: the reference service marks an
// unlimited descriptor before it drops the limits named in replaces, so an
// unlimited limit that another matched limit replaces still answers OK
// with 4294967295 remaining.
func TestReplacedUnlimitedStaysUnlimited(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: free
    rate_limit: {unlimited: true, name: freebie}
  - key: paid
    rate_limit: {unit: minute, requests_per_unit: 3, replaces: [{name: freebie}]}
`), envOpts{})
	r := e.call(t, "p", 0, desc("free", "x"), desc("paid", "x"))
	if codesOf(r) != "O:OO" || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("unlimited replaced: %s %v, want OK with %d remaining and no limit", codesOf(r), r.Statuses[0], uint32(math.MaxUint32))
	}
	if r.Statuses[1].LimitRemaining != 2 {
		t.Errorf("the replacing limit: %v, want 2 of 3 left", r.Statuses[1])
	}
}

// TestShadowQuotaDescriptorNeverOver: a quota_mode descriptor in
// shadow_mode answers OK even when over, so while one applies, the request's
// quota descriptors are not all over and do not deny it, as in the
// reference service (its overall code follows the statuses it returns).
func TestShadowQuotaDescriptorNeverOver(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, `domain: p
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: sq
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: rpu0
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
`), envOpts{})
			e.expect(t, "q alone, under", []string{"O:O"}, "p", desc("q", "x"))
			e.expect(t, "q over with a shadow quota under", []string{"O:XO"}, "p", desc("q", "x"), desc("sq", "y"))
			if got := e.remaining(t, "p", "sq", "y"); got != 0 {
				t.Errorf("sq remaining = %d, want 0: counted by the request it admitted", got)
			}
			e.expect(t, "q over with a shadow quota over", []string{"O:XO"}, "p", desc("q", "x"), desc("sq", "y"))
			e.expect(t, "q over with a shadow quota of 0", []string{"O:XO"}, "p", desc("q", "x"), desc("rpu0", "z"))
			e.expect(t, "q over alone", []string{"X:X"}, "p", desc("q", "x"))
		})
	}
}

// TestOverrideUnitMultiplierInStatus: a limit override of 2 per 10 minutes
// (unit_multiplier 10) is counted over 10 minutes, and its status says so:
// current_limit carries the multiplier, duration_until_reset runs to the
// end of the 10-minute window (Envoy's X-RateLimit headers are made of
// these).
func TestOverrideUnitMultiplierInStatus(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	for _, rpu := range []uint32{2, 0} {
		d := func() *commonv3.RateLimitDescriptor {
			d := withLimit(desc("user", "m"), rpu, typev3.RateLimitUnit_MINUTE)
			d.Limit.UnitMultiplier = wrapperspb.UInt32(10)
			return d
		}
		want := []string{"O:O", "O:O", "X:X"}
		if rpu == 0 {
			want = []string{"X:X"}
		}
		r := e.expect(t, "2 per 10 minutes", want, "web", d())
		l := r.Statuses[0].CurrentLimit
		if l.GetRequestsPerUnit() != rpu || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetUnitMultiplier().GetValue() != 10 {
			t.Errorf("%d per 10 minutes: current_limit = %v, want %d per MINUTE × 10", rpu, l, rpu)
		}
		// tMid is 10:00:30: the 10-minute window ends at 10:10:00.
		if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 9*time.Minute+30*time.Second {
			t.Errorf("%d per 10 minutes: duration_until_reset = %v, want 9m30s", rpu, got)
		}
	}
	r := e.call(t, "web", 0, withLimit(desc("user", "n"), 2, typev3.RateLimitUnit_MINUTE))
	if m := r.Statuses[0].CurrentLimit.GetUnitMultiplier(); m != nil {
		t.Errorf("an override without a multiplier: current_limit.unit_multiplier = %v, want none", m)
	}
}

// TestReferenceHealthChecks: the health checks a deployment of the
// reference service probes answer as there: gRPC health for the service
// name "ratelimit", and GET /healthcheck on the HTTP listener, 200 "OK".
func TestReferenceHealthChecks(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	r, err := healthpb.NewHealthClient(e.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf(`gRPC health "ratelimit": %v %v, want SERVING`, r, err)
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(method, e.http.URL+"/healthcheck", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "OK"
		if method == http.MethodHead {
			want = ""
		}
		if resp.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("%s /healthcheck: %d %q, want 200 %q", method, resp.StatusCode, body, want)
		}
	}
}

// TestShareThresholdNested: share_threshold on a wildcard level counts
// every value it matches in one counter even when the limit is a level
// below it, as in the reference service; the lower level's values still
// count apart.
func TestShareThresholdNested(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, `domain: p
descriptors:
  - key: path
    value: /api/*
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 2}
`), envOpts{})
			e.expect(t, "/api/a GET", []string{"O:O"}, "p", desc("path", "/api/a", "method", "GET"))
			e.expect(t, "/api/b GET shares /api/a's count", []string{"O:O", "X:X"}, "p", desc("path", "/api/b", "method", "GET"))
			e.expect(t, "/api/c POST counts apart", []string{"O:O", "O:O", "X:X"}, "p", desc("path", "/api/c", "method", "POST"))
		})
	}
}

// TestHeadersOfTheDenyingDescriptor: the rate-limit headers of a denied
// request are those of a descriptor that denies it, as in the reference
// service: not those of a quota_mode descriptor that is over while
// another quota descriptor is under (it denies nothing), whose reset may
// be much further away.
func TestHeadersOfTheDenyingDescriptor(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 1}
`), envOpts{headers: true})
	ds := func() []*commonv3.RateLimitDescriptor {
		return []*commonv3.RateLimitDescriptor{desc("q", "x"), desc("q2", "x"), desc("h", "x")}
	}
	e.expect(t, "all under", []string{"O:OOO"}, "p", ds()...)
	r := e.expect(t, "q and h over, q2 under", []string{"X:XOX"}, "p", ds()...)
	h := map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	// tMid is 30 s into the minute and the hour: h's window ends in 30 s,
	// q's in 59 min 30 s.
	if h["RateLimit-Limit"] != "1" || h["RateLimit-Reset"] != "30" || h["Retry-After"] != "30" {
		t.Errorf("headers = %v, want h's: limit 1, reset and Retry-After 30", h)
	}
	// Without q2, q is every quota descriptor: it denies too, and for
	// longer than h.
	r = e.expect(t, "q and h over, q alone", []string{"X:XX"}, "p", desc("q", "x"), desc("h", "x"))
	h = map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if h["RateLimit-Reset"] != "3570" || h["Retry-After"] != "3570" {
		t.Errorf("headers = %v, want q's: reset and Retry-After 3570", h)
	}
}

// downStore cannot decide anything: the store is down.
type downStore struct{}

func (downStore) Take(context.Context, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, fmt.Errorf("down: %w", sluice.ErrStoreUnavailable)
}

func (downStore) TakeAll(context.Context, []sluice.Request, []sluice.Decision) error {
	return fmt.Errorf("down: %w", sluice.ErrStoreUnavailable)
}

// TestNoHeadersWhenTheStoreFails: with the store down, the answer is the
// on_error policy's, and it carries no rate-limit headers nor, for the
// descriptors the store could not decide, a limit and its figures (nothing
// is known of the counters: "RateLimit-Remaining: 0", or Envoy's own
// X-RateLimit headers made from the statuses, would make well-behaved
// clients back off while every request is let through), as the HTTP
// middleware fails open without headers. A descriptor decided without
// the store keeps its status.
func TestNoHeadersWhenTheStoreFails(t *testing.T) {
	conf := plainConf + "  - key: block\n    rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: free\n    rate_limit: {unlimited: true}\n"
	for _, onError := range []string{"allow", "deny"} {
		e := startRLS(t, downStore{}, writeConf(t, conf), envOpts{onError: onError, headers: true})
		r := e.call(t, "web", 0, desc("user", "x"))
		want, code := "O:O", rlsv3.RateLimitResponse_OK
		if onError == "deny" {
			want, code = "X:X", rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if codesOf(r) != want || len(r.ResponseHeadersToAdd) != 0 {
			t.Errorf("on_error %s, store down: %s with headers %v, want %s and no headers", onError, codesOf(r), r.ResponseHeadersToAdd, want)
		}
		if s := r.Statuses[0]; s.CurrentLimit != nil || s.LimitRemaining != 0 || s.DurationUntilReset != nil {
			t.Errorf("on_error %s, store down: status %v, want no limit nor figures", onError, s)
		}
		r = e.call(t, "web", 0, desc("user", "x"), desc("free", "x"))
		if r.Statuses[1].LimitRemaining != math.MaxUint32 || r.Statuses[0].Code != code {
			t.Errorf("on_error %s, store down, with an unlimited descriptor: %v", onError, r.Statuses)
		}
		r = e.call(t, "web", 0, desc("block", "x"))
		if codesOf(r) != "X:X" || r.Statuses[0].CurrentLimit == nil {
			t.Errorf("on_error %s, a block list (decided without the store): %s %v, want OVER_LIMIT with its limit", onError, codesOf(r), r.Statuses[0])
		}
	}
}

// TestBlockListRefusesChecks: requests_per_unit 0 refuses every request,
// a check that counts nothing (hits_addend 0) included: a deliberate
// difference (the reference service admits such a check until the
// window's first counted request).
func TestBlockListRefusesChecks(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, "domain: p\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 0}\n"), envOpts{})
	r := e.call(t, "p", 0, withHits(desc("ip", "10.0.0.1"), 0))
	if codesOf(r) != "X:X" || r.Statuses[0].CurrentLimit == nil || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("a check on a block list: %s %v, want OVER_LIMIT with the 0 limit", codesOf(r), r.Statuses[0])
	}
}

// TestHugeRequests: requests far past the bounds are refused, each with
// its code, and the service answers the next one as usual.
func TestHugeRequests(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	many := make([]*commonv3.RateLimitDescriptor, 5000)
	for i := range many {
		many[i] = desc("user", fmt.Sprint(i))
	}
	var kv []string
	for i := range 1000 {
		kv = append(kv, fmt.Sprint("k", i), "v")
	}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want codes.Code
	}{
		{"5,000 descriptors", &rlsv3.RateLimitRequest{Domain: "web", Descriptors: many}, codes.InvalidArgument},
		{"1,000 entries", &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc(kv...)}}, codes.InvalidArgument},
		{"a 5 MiB value", &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("user", strings.Repeat("x", 5<<20))}}, codes.ResourceExhausted},
		{"a 5 MiB domain", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 5<<20), Descriptors: []*commonv3.RateLimitDescriptor{desc("user", "x")}}, codes.ResourceExhausted},
	} {
		_, err := e.client.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	e.expect(t, "a request after them", []string{"O:O"}, "web", desc("user", "after"))
	r := e.call(t, "web", 0, desc("user", strings.Repeat("y", 512<<10)))
	if codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != 1 {
		t.Errorf("a 512 KiB value: %s %v, want OK, counted under its own key", codesOf(r), r.Statuses[0])
	}
}

// TestGlobalShadowMode: with the service in shadow mode (the reference
// service's SHADOW_MODE), no limit denies: the overall code is OK, each
// status still says OVER_LIMIT where its limit is over, and a request is
// counted by the descriptors under their limits, as with shadow_mode on
// every descriptor.
func TestGlobalShadowMode(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, plainConf+`  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: block
    rate_limit: {unit: minute, requests_per_unit: 0}
`), envOpts{shadow: true, headers: true})
			e.expect(t, "user under, then over", []string{"O:OO", "O:OO", "O:XO"}, "web", desc("user", "s"), desc("global", "g"))
			if got := e.remaining(t, "web", "global", "g"); got != 97 {
				t.Errorf("global remaining = %d, want 97: every admitted request counted", got)
			}
			e.expect(t, "quota and block list", []string{"O:OX", "O:XX"}, "web", desc("q", "x"), desc("block", "x"))
			r := e.call(t, "web", 0, desc("user", "s"))
			for _, h := range r.ResponseHeadersToAdd {
				if h.Key == "Retry-After" {
					t.Errorf("Retry-After on an answer that lets the request through: %v", r.ResponseHeadersToAdd)
				}
			}
			m := metricstest.Gather(t, e.reg)
			if got := m[`sluice_envoy_shadow_mode_total{descriptor="user",domain="web"}`]; got != 2 {
				t.Errorf("user's shadow_mode count = %v, want 2 (the calls it would have denied)", got)
			}
			if got := m[`sluice_envoy_over_limit_total{descriptor="user",domain="web"}`]; got != 0 {
				t.Errorf("user's over_limit count = %v, want 0 (nothing denied)", got)
			}
		})
	}
}

// TestKeysMatchedAsGiven: a deliberate difference. The reference service
// joins key and value with "_" before the lookup, so there its rule a_b
// matches the entry a=b, its rule m=n_o the entry m_n=o, and a "*" in a
// key is a wildcard; Sluice matches each key exactly.
func TestKeysMatchedAsGiven(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: a_b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: m
    value: n_o
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: "x*"
    rate_limit: {unit: minute, requests_per_unit: 1}
`), envOpts{})
	for _, d := range []*commonv3.RateLimitDescriptor{desc("a", "b"), desc("m_n", "o"), desc("xy", "z")} {
		if r := e.call(t, "p", 0, d); r.Statuses[0].CurrentLimit != nil {
			t.Errorf("%v matched a rule: %v", d.Entries, r.Statuses[0])
		}
	}
	for _, d := range []*commonv3.RateLimitDescriptor{desc("a_b", "v"), desc("m", "n_o"), desc("x*", "z")} {
		if r := e.call(t, "p", 0, d); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
			t.Errorf("%v matched no rule: %v", d.Entries, r.Statuses[0])
		}
	}
}
