package server_test

import (
	"math"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice/internal/metrics/metricstest"
)

// The worked examples of the reference rate limit service's README
// (section "Examples"), each restated here as the decisions it promises,
// plus the request semantics around them. Every scenario runs on the
// memory store, a single Redis and a three-node Redis Cluster.

var exampleFiles = []string{
	// Example 1: two values of one key, each its own limit.
	`domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 500}
`,
	// Example 2: a nested limit per phone number for marketing, and an
	// overall one per number.
	`domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`,
	// Example 3: key+value is matched before the key alone.
	`domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`,
	// Example 4: a request matches only rules at its own depth.
	`domain: example4
descriptors:
  - key: key
    value: value
    rate_limit: {requests_per_unit: 300, unit: second}
`,
	`domain: example4_nested
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit: {requests_per_unit: 300, unit: second}
`,
	// Example 5: unlimited.
	`domain: internal
descriptors:
  - key: ldap
    rate_limit: {unlimited: true}
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 100}
`,
	// Example 6: shadow_mode.
	`domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 10, unit: second}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 20, unit: second}
`,
	// Example 7: replaces.
	`domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
`,
	// Example 8: detailed_metric.
	`domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
`,
	// Example 9: wildcards, trailing, in the middle, several.
	`domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
`,
	// Example 10: value_to_metric.
	`domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
`,
	// Example 11: share_threshold.
	`domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit: {unit: hour, requests_per_unit: 10}
`,
	// Beyond the README: quota_mode, Sluice algorithms, hits_addend.
	`domain: semantics
descriptors:
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: bucket
    algorithm: token_bucket
    burst: 3
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 2}
`,
}

func TestExamples(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, exampleFiles...), envOpts{})
			t.Run("1 values of one key", func(t *testing.T) {
				r := e.call(t, "mongo_cps", 500, desc("database", "users"))
				if codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != 0 || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 500 {
					t.Fatalf("500 hits on users: %s %v, want OK with 0 remaining of 500", codesOf(r), r.Statuses[0])
				}
				e.expect(t, "users past 500/s", []string{"X:X"}, "mongo_cps", desc("database", "users"))
				m := metricstest.Gather(t, e.reg)
				for name, want := range map[string]float64{"hits": 501, "near_limit": 100, "over_limit": 1} {
					if got := m[`sluice_envoy_`+name+`_total{descriptor="database_users",domain="mongo_cps"}`]; got != want {
						t.Errorf("sluice_envoy_%s_total = %v, want %v (hits above 400 of 500 are near the limit)", name, got, want)
					}
				}
				e.expect(t, "default has its own 500/s", []string{"O:O"}, "mongo_cps", desc("database", "default"))
				e.expect(t, "another value has no limit", []string{"O:O"}, "mongo_cps", desc("database", "other"))
			})
			t.Run("2 nested and aggregate", func(t *testing.T) {
				both := func(n string) (a, b []string) {
					return []string{"message_type", "marketing", "to_number", n}, []string{"to_number", n}
				}
				a, b := both("2061111111")
				for i := range 5 {
					r := e.call(t, "messaging", 0, desc(a...), desc(b...))
					if codesOf(r) != "O:OO" || r.Statuses[0].LimitRemaining != uint32(4-i) || r.Statuses[1].LimitRemaining != uint32(99-i) {
						t.Fatalf("marketing message %d: %s %v", i+1, codesOf(r), r.Statuses)
					}
				}
				r := e.call(t, "messaging", 0, desc(a...), desc(b...))
				if codesOf(r) != "X:XO" {
					t.Fatalf("sixth marketing message: %s, want X:XO (a logical OR of both)", codesOf(r))
				}
				if got := e.remaining(t, "messaging", b...); got != 95 {
					t.Errorf("to_number remaining after the denied sixth message = %d, want 95: denied traffic consumes nothing", got)
				}
				a2, _ := both("2062222222")
				e.expect(t, "another number's marketing limit", repeat("O:O", 5), "messaging", desc(a2...))
			})
			t.Run("3 value before key", func(t *testing.T) {
				e.expect(t, "blocked address", []string{"X:X", "X:X"}, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
				e.expect(t, "any other address", append(repeat("O:O", 10), "X:X"), "edge_proxy_per_ip", desc("remote_address", "50.0.0.1"))
				e.expect(t, "each address apart", []string{"O:O"}, "edge_proxy_per_ip", desc("remote_address", "50.0.0.2"))
			})
			t.Run("4 depth", func(t *testing.T) {
				r := e.expect(t, "two entries, one level", []string{"O:O"}, "example4", desc("key", "value", "subkey", "subvalue"))
				if r.Statuses[0].CurrentLimit != nil {
					t.Errorf("a 2-entry descriptor matched the depth-1 rule: %v", r.Statuses[0])
				}
				r = e.expect(t, "two entries, two levels", []string{"O:O"}, "example4_nested", desc("key", "value", "subkey", "subvalue"))
				if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 300 || r.Statuses[0].LimitRemaining != 299 {
					t.Errorf("nested match: %v, want 299 of 300 left", r.Statuses[0])
				}
			})
			t.Run("5 unlimited", func(t *testing.T) {
				r := e.call(t, "internal", 1000, desc("ldap", "x"))
				if codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != math.MaxUint32 {
					t.Errorf("unlimited: %s %v, want OK with MaxUint32 remaining", codesOf(r), r.Statuses[0])
				}
				e.expect(t, "azure", repeat("O:O", 1), "internal", desc("azure", "x"))
			})
			t.Run("6 shadow_mode", func(t *testing.T) {
				e.expect(t, "user-a in shadow mode", repeat("O:O", 12), "example6", desc("service", "auth", "user", "user-a"))
				e.expect(t, "user-b enforced", append(repeat("O:O", 20), "X:X"), "example6", desc("service", "auth", "user", "user-b"))
				m := metricstest.Gather(t, e.reg)
				if got := m[`sluice_envoy_shadow_mode_total{descriptor="service.user_user-a",domain="example6"}`]; got != 2 {
					t.Errorf("shadow_mode count = %v, want 2 (the 11th and 12th calls)", got)
				}
			})
			t.Run("7 replaces", func(t *testing.T) {
				one := []string{"key_1", "value_1", "user", "bkthomps"}
				two := []string{"key_2", "value_2", "user", "bkthomps"}
				for i := range 10 {
					r := e.call(t, "example7", 0, desc(one...), desc(two...))
					if codesOf(r) != "O:OO" || r.Statuses[0].CurrentLimit != nil {
						t.Fatalf("call %d with both: %s %v; want OK with the 5/s limit replaced", i+1, codesOf(r), r.Statuses)
					}
				}
				e.expect(t, "both past 10/s", []string{"X:OX"}, "example7", desc(one...), desc(two...))
				if got := e.remaining(t, "example7", one...); got != 5 {
					t.Errorf("the replaced limit's remaining = %d, want 5 (untouched)", got)
				}
				e.expect(t, "key_1 alone", append(repeat("O:O", 5), "X:X"), "example7", desc(one...))
			})
			t.Run("8 detailed_metric", func(t *testing.T) {
				e.expect(t, "an unlisted value", append(repeat("O:O", 10), "X:X"), "example8", desc("key1", "unspecified_value"))
				e.expect(t, "another unlisted value", repeat("O:O", 10), "example8", desc("key1", "unspecified_value2"))
				e.expect(t, "the listed value", repeat("O:O", 20), "example8", desc("key1", "value1"))
				m := metricstest.Gather(t, e.reg)
				for label, want := range map[string]float64{"key1_unspecified_value": 11, "key1_unspecified_value2": 10, "key1_value1": 20} {
					if got := m[`sluice_envoy_hits_total{descriptor="`+label+`",domain="example8"}`]; got != want {
						t.Errorf("hits of %s = %v, want %v", label, got, want)
					}
				}
			})
			t.Run("9 wildcards", func(t *testing.T) {
				e.expect(t, "trailing", append(repeat("O:O", 20), "X:X"), "example9", desc("key1", "valueXYZ"))
				e.expect(t, "each matching value apart", []string{"O:O"}, "example9", desc("key1", "value2"))
				r := e.expect(t, "prefix not matched", []string{"O:O"}, "example9", desc("key1", "valu"))
				if r.Statuses[0].CurrentLimit != nil {
					t.Errorf("valu matched value*: %v", r.Statuses[0])
				}
				r = e.expect(t, "middle", []string{"O:O"}, "example9", desc("path", "/api/123/action"))
				if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 20 {
					t.Errorf("/api/123/action: %v, want the 20/min limit", r.Statuses[0])
				}
				r = e.expect(t, "middle, other suffix", []string{"O:O"}, "example9", desc("path", "/api/123/other"))
				if r.Statuses[0].CurrentLimit != nil {
					t.Errorf("/api/123/other matched /api/*/action")
				}
				r = e.expect(t, "several", []string{"O:O"}, "example9", desc("route", "/api/v1/resource/123/action"))
				if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 20 {
					t.Errorf("several wildcards: %v", r.Statuses[0])
				}
			})
			t.Run("10 value_to_metric", func(t *testing.T) {
				e.expect(t, "api GET", []string{"O:O"}, "example10", desc("route", "api", "http_method", "GET", "subject_id", "123"))
				e.expect(t, "web POST", []string{"O:O"}, "example10", desc("route", "web", "http_method", "POST", "subject_id", "456"))
				m := metricstest.Gather(t, e.reg)
				for _, label := range []string{"route_api.http_method_GET.subject_id", "route_web.http_method_POST.subject_id"} {
					if got := m[`sluice_envoy_hits_total{descriptor="`+label+`",domain="example10"}`]; got != 1 {
						t.Errorf("hits of %s = %v, want 1", label, got)
					}
				}
			})
			t.Run("11 share_threshold", func(t *testing.T) {
				e.expect(t, "files/a.pdf", repeat("O:O", 5), "example11", desc("files", "files/a.pdf"))
				e.expect(t, "files/b.csv", repeat("O:O", 5), "example11", desc("files", "files/b.csv"))
				e.expect(t, "files/c.txt shares the threshold", []string{"X:X"}, "example11", desc("files", "files/c.txt"))
				e.expect(t, "files_no_share/a.pdf", append(repeat("O:O", 10), "X:X"), "example11", desc("files_no_share", "files_no_share/a.pdf"))
				e.expect(t, "files_no_share/b.csv apart", repeat("O:O", 10), "example11", desc("files_no_share", "files_no_share/b.csv"))
			})
			t.Run("quota_mode", func(t *testing.T) {
				e.expect(t, "both quotas under", repeat("O:OO", 2), "semantics", desc("q1", "a"), desc("q2", "a"))
				e.expect(t, "one quota over", []string{"O:XO", "O:XO"}, "semantics", desc("q1", "a"), desc("q2", "a"))
				if got := e.remaining(t, "semantics", "q2", "a"); got != 0 {
					t.Errorf("q2 remaining = %d, want 0: counted by every admitted request", got)
				}
				e.expect(t, "every quota over", []string{"X:XX"}, "semantics", desc("q1", "a"), desc("q2", "a"))
				// The request's only quota descriptor is over: every quota one is.
				e.expect(t, "the only quota over, with a normal limit", []string{"X:XO"}, "semantics", desc("q1", "a"), desc("plan", "q"))
				if got := e.remaining(t, "semantics", "plan", "q"); got != 5 {
					t.Errorf("plan remaining = %d, want 5", got)
				}
			})
			t.Run("hits_addend", func(t *testing.T) {
				r := e.call(t, "semantics", 3, desc("plan", "h"))
				if r.Statuses[0].LimitRemaining != 2 {
					t.Fatalf("request hits_addend 3 of 5: remaining %d, want 2", r.Statuses[0].LimitRemaining)
				}
				r = e.call(t, "semantics", 3, withHits(desc("plan", "h"), 2), withHits(desc("plan", "h2"), 0))
				if codesOf(r) != "O:OO" || r.Statuses[0].LimitRemaining != 0 || r.Statuses[1].LimitRemaining != 5 {
					t.Fatalf("per-descriptor hits 2 and 0: %s %v, want 0 and 5 remaining", codesOf(r), r.Statuses)
				}
				r = e.call(t, "semantics", 0, withHits(desc("plan", "h"), 0))
				if codesOf(r) != "O:O" {
					t.Errorf("hits 0 at the limit: %s, want OK (a check counts nothing)", codesOf(r))
				}
				e.expect(t, "one more hit", []string{"X:X"}, "semantics", desc("plan", "h"))
				r = e.call(t, "semantics", 6, desc("plan", "h3"))
				if codesOf(r) != "X:X" || e.remaining(t, "semantics", "plan", "h3") != 5 {
					t.Errorf("6 hits on a limit of 5: %s, want over and nothing counted", codesOf(r))
				}
			})
			t.Run("overrides", func(t *testing.T) {
				d := func() *commonv3.RateLimitDescriptor {
					return withLimit(desc("plan", "o"), 2, typev3.RateLimitUnit_HOUR)
				}
				r := e.expect(t, "override 2/hour", []string{"O:O", "O:O", "X:X"}, "semantics", d())
				if got := r.Statuses[0].CurrentLimit; got.GetRequestsPerUnit() != 2 || got.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
					t.Errorf("override's current_limit = %v, want 2/HOUR", got)
				}
				// The config's 5/min for the same descriptor is untouched.
				if got := e.remaining(t, "semantics", "plan", "o"); got != 5 {
					t.Errorf("config limit remaining = %d, want 5", got)
				}
				e.expect(t, "override on a descriptor with no rule", []string{"O:O", "X:X"}, "semantics", withLimit(desc("nothing", "x"), 1, typev3.RateLimitUnit_MINUTE))
			})
			t.Run("algorithms and units", func(t *testing.T) {
				r := e.expect(t, "token bucket burst 3", []string{"O:O", "O:O", "O:O", "X:X"}, "semantics", desc("bucket", "b"))
				if d := r.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 {
					t.Errorf("token bucket duration_until_reset = %v, want > 0", d)
				}
				r = e.expect(t, "week", []string{"O:O", "O:O", "X:X"}, "semantics", desc("week", "w"))
				if r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_WEEK {
					t.Errorf("unit = %v, want WEEK", r.Statuses[0].CurrentLimit.GetUnit())
				}
			})
			t.Run("unknown domain and descriptor", func(t *testing.T) {
				r := e.expect(t, "unknown domain", []string{"O:OO"}, "nowhere", desc("a", "b"), desc("c", "d"))
				if r.Statuses[0].CurrentLimit != nil {
					t.Errorf("unknown domain status has a limit: %v", r.Statuses[0])
				}
				e.expect(t, "unknown descriptor", []string{"O:O"}, "semantics", desc("who", "knows"))
			})
		})
	}
}
