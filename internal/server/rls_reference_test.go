package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/memstore"
)

// More corners of the reference service's semantics, each as it answers.

// TestDurationUntilResetWholeSeconds: the reference service answers
// duration_until_reset in whole seconds (the time to the end of the
// epoch-aligned window, counted from the current second), and Envoy reads
// only its seconds (its X-RateLimit-Reset header). Half a second into a
// second, 29.5 s before the minute's end, the answer is 30 s: a fraction
// would reach the client as 29, sending it back while the window still
// refuses it (and as 0 in the window's last second).
func TestDurationUntilResetWholeSeconds(t *testing.T) {
	conf := `domain: p
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: w
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: tb
    algorithm: token_bucket
    rate_limit: {unit: second, requests_per_unit: 4}
`
	for _, tc := range []struct {
		name string
		at   time.Time
		kv   []string
		want time.Duration
	}{
		{"minute, half a second in", tMid.Add(500 * time.Millisecond), []string{"m", "a"}, 30 * time.Second},
		{"minute, in its last second", tMid.Add(29*time.Second + 999*time.Millisecond), []string{"m", "b"}, time.Second},
		{"minute, on the second", tMid, []string{"m", "c"}, 30 * time.Second},
		// tMid is Monday 2026-03-02 10:00:30 UTC. Weeks since the epoch
		// start on Thursdays (1970-01-01 was one): this one ends Thursday
		// 2026-03-05 00:00 UTC.
		{"week", tMid.Add(250 * time.Millisecond), []string{"w", "a"}, 2*24*time.Hour + 13*time.Hour + 59*time.Minute + 30*time.Second},
		// 30-day months since the epoch: day 20514 (2026-03-02) is day 24
		// of the month that began on day 20490 and ends on day 20520
		// (2026-03-08 00:00 UTC).
		{"month", tMid, []string{"mo", "a"}, 5*24*time.Hour + 13*time.Hour + 59*time.Minute + 30*time.Second},
		// 365-day years since the epoch: the 57th begins on day 20440
		// (2025-12-19) and ends on day 20805 (2026-12-19 00:00 UTC).
		{"year", tMid, []string{"y", "a"}, 290*24*time.Hour + 13*time.Hour + 59*time.Minute + 30*time.Second},
		// A token bucket of 4/s is full again 250 ms after a hit: 1 s.
		{"token bucket", tMid.Add(100 * time.Millisecond), []string{"tb", "a"}, time.Second},
	} {
		at := tc.at
		e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, conf), envOpts{now: func() time.Time { return at }})
		r := e.call(t, "p", 0, desc(tc.kv...))
		d := r.Statuses[0].DurationUntilReset
		if d.GetNanos() != 0 || d.AsDuration() != tc.want {
			t.Errorf("%s: duration_until_reset = %v (%d s %d ns), want %v in whole seconds", tc.name, d.AsDuration(), d.GetSeconds(), d.GetNanos(), tc.want)
		}
	}
}

// TestRequestCorners: requests the reference service answers without an
// error, each as it answers them.
func TestRequestCorners(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 1}
`), envOpts{})
	// An entry with an empty value matches the key alone, and counts
	// apart from the other values (the reference keys it "user_").
	e.expect(t, "user with an empty value", []string{"O:O", "O:O", "X:X"}, "p", desc("user", ""))
	e.expect(t, "user x after the empty value", []string{"O:O"}, "p", desc("user", "x"))
	// A wildcard "*" matches the empty value too.
	e.expect(t, "path with an empty value", []string{"O:O", "X:X"}, "p", desc("path", ""))
	// A descriptor with no entries matches nothing; with a limit
	// override, the override applies.
	if r := e.call(t, "p", 0, desc()); codesOf(r) != "O:O" || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("a descriptor without entries: %s %v, want OK without a limit", codesOf(r), r.Statuses[0])
	}
	e.expect(t, "no entries, 1/minute override", []string{"O:O", "X:X"}, "p", withLimit(desc(), 1, typev3.RateLimitUnit_MINUTE))
	// An unknown domain answers OK without a limit, a limit override
	// included (the reference looks up the domain first).
	if r := e.call(t, "nope", 0, withLimit(desc("user", "y"), 0, typev3.RateLimitUnit_MINUTE)); codesOf(r) != "O:O" || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("an override in an unknown domain: %s %v, want OK without a limit", codesOf(r), r.Statuses[0])
	}
	// The request's hits_addend is each descriptor's cost, but for one
	// with its own (0: checked, not counted).
	r := e.call(t, "p", 2, desc("user", "z"), withHits(desc("user", "w"), 0))
	if codesOf(r) != "O:OO" || r.Statuses[0].LimitRemaining != 0 || r.Statuses[1].LimitRemaining != 2 {
		t.Errorf("hits_addend 2 with a descriptor of its own 0: %s %v, want O:OO with 0 and 2 left", codesOf(r), r.Statuses)
	}
}

// TestSameDescriptorTwice: Envoy sends one descriptor twice when two of
// its rate limit actions produce it (a route's and its virtual host's).
// The reference service counts each occurrence in turn (two INCRBY of the
// key in one pipeline): with 3 a minute, the first request counts 2, and
// the second, at 3 then 4, is over.
func TestSameDescriptorTwice(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, `domain: p
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tb
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 3}
`), envOpts{})
			for _, k := range []string{"ip", "tb"} {
				r := e.call(t, "p", 0, desc(k, "a"), desc(k, "a"))
				if codesOf(r) != "O:OO" || r.Statuses[0].LimitRemaining != 2 || r.Statuses[1].LimitRemaining != 1 {
					t.Errorf("%s: first request: %s %v, want O:OO with 2 then 1 left", k, codesOf(r), r.Statuses)
				}
				if got := e.remaining(t, "p", k, "a"); got != 1 {
					t.Errorf("%s: remaining after the first request = %d, want 1 (counted twice)", k, got)
				}
				r = e.call(t, "p", 0, desc(k, "a"), desc(k, "a"))
				if codesOf(r) != "X:OX" {
					t.Errorf("%s: second request: %s %v, want X:OX", k, codesOf(r), r.Statuses)
				}
				if got := e.remaining(t, "p", k, "a"); got != 1 {
					t.Errorf("%s: remaining after the denied request = %d, want 1 (denied traffic consumes nothing)", k, got)
				}
			}
		})
	}
}

// TestCurrentLimitOfTheRule: current_limit carries the rule's name,
// requests_per_unit and unit, as the reference service fills it (Envoy
// names the quota policy of its X-RateLimit-Limit header after it).
func TestCurrentLimitOfTheRule(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 7, name: per_user}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 9}
`), envOpts{})
	r := e.call(t, "p", 0, desc("user", "u"), desc("ip", "i"))
	for i, want := range []*rlsv3.RateLimitResponse_RateLimit{
		{Name: "per_user", RequestsPerUnit: 7, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR},
		{RequestsPerUnit: 9, Unit: rlsv3.RateLimitResponse_RateLimit_DAY},
	} {
		got := r.Statuses[i].CurrentLimit
		if got.GetName() != want.Name || got.GetRequestsPerUnit() != want.RequestsPerUnit || got.GetUnit() != want.Unit || got.GetUnitMultiplier() != nil {
			t.Errorf("status %d: current_limit = %v, want %v", i, got, want)
		}
	}
}

// TestGlobalQuotaMode: with the service in quota mode (the reference
// service's QUOTA_MODE), every descriptor is decided as one with
// quota_mode: a request is over the limit only when all its descriptors
// are. As in the reference, a descriptor without a limit (no match,
// replaced) is one of them that is never over; an unlimited one is not.
func TestGlobalQuotaMode(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, `domain: p
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
`), envOpts{quota: true, headers: true})
			e.expect(t, "a and b under", []string{"O:OO"}, "p", desc("a", "x"), desc("b", "x"))
			e.expect(t, "a over, b under", []string{"O:XO"}, "p", desc("a", "x"), desc("b", "y"))
			if got := e.remaining(t, "p", "b", "y"); got != 0 {
				t.Errorf("b=y remaining = %d, want 0: counted by the request it admitted", got)
			}
			r := e.expect(t, "a and b over", []string{"X:XX"}, "p", desc("a", "x"), desc("b", "y"))
			var retry bool
			for _, h := range r.ResponseHeadersToAdd {
				retry = retry || h.Key == "Retry-After"
			}
			if !retry {
				t.Errorf("a and b over: headers %v, want a Retry-After", r.ResponseHeadersToAdd)
			}
			e.expect(t, "a over with a descriptor matching nothing", []string{"O:XO"}, "p", desc("a", "x"), desc("none", "z"))
			e.expect(t, "a over with an unlimited descriptor", []string{"X:XO"}, "p", desc("a", "x"), desc("free", "z"))
			e.expect(t, "a over alone", []string{"X:X"}, "p", desc("a", "x"))
		})
	}
}

// TestOverrideUnitByNumber: the reference service reads a limit
// override's unit by its number as the unit of its answer
// (RateLimitResponse.RateLimit.Unit), where 7 is WEEK: Envoy's
// type.v3.RateLimitUnit numbers MONTH and YEAR as that enum does (5, 6)
// and has no WEEK yet, so a 7 is a week there, not a request to refuse.
// Another number is refused, naming the descriptor, and nothing of the
// request is counted.
func TestOverrideUnitByNumber(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	const week = typev3.RateLimitUnit(7)
	e.expect(t, "1 a week", []string{"O:O", "X:X"}, "web", withLimit(desc("user", "w"), 1, week))
	r := e.call(t, "web", 0, withLimit(desc("user", "w"), 1, week))
	if u := r.Statuses[0].CurrentLimit.GetUnit(); u != rlsv3.RateLimitResponse_RateLimit_WEEK {
		t.Errorf("an override of unit 7: current_limit.unit = %v, want WEEK", u)
	}
	// tMid is Monday 2026-03-02 10:00:30 UTC; weeks since the epoch end
	// on Thursdays, this one on 2026-03-05 00:00 UTC.
	if got, want := r.Statuses[0].DurationUntilReset.AsDuration(), 2*24*time.Hour+13*time.Hour+59*time.Minute+30*time.Second; got != want {
		t.Errorf("an override of unit 7: duration_until_reset = %v, want %v (the week's end)", got, want)
	}
	// UNKNOWN (0, an override without a unit) crashes the reference
	// service (its unit lookup panics); here it is refused as 8 is.
	for _, u := range []typev3.RateLimitUnit{8, typev3.RateLimitUnit_UNKNOWN} {
		_, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web",
			Descriptors: []*descriptorPB{desc("user", "x"), withLimit(desc("user", "y"), 1, u)}})
		if want := fmt.Sprintf("descriptors[1].limit: unit %s is not one of", rlsv3.RateLimitResponse_RateLimit_Unit(u)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("an override of unit %d: %v, want INVALID_ARGUMENT %q", u, err, want)
		}
	}
	if got := e.remaining(t, "web", "user", "x"); got != 2 {
		t.Errorf("user=x remaining after the refused request = %d, want 2 (nothing counted)", got)
	}
}

// rawCodec sends and receives messages as the bytes given: a request no
// protobuf library would write (rawRequest).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestEmptyKey: an entry with an empty key matches no rule (a descriptor
// file's keys are never empty; the reference looks up "_VALUE", which no
// rule is either) and answers OK without a limit, a wildcard rule
// included; with a limit override, it counts under the override, apart
// from the same value under a key.
func TestEmptyKey(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, `domain: p
descriptors:
  - key: user
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 1}
`), envOpts{})
	for _, d := range []*descriptorPB{desc("", "x"), desc("", ""), desc("", "x", "user", "y")} {
		if r := e.call(t, "p", 0, d); codesOf(r) != "O:O" || r.Statuses[0].CurrentLimit != nil {
			t.Errorf("%v: %s %v, want OK without a limit", d.Entries, codesOf(r), r.Statuses[0])
		}
	}
	e.expect(t, "an empty key with a 1/minute override", []string{"O:O", "X:X"}, "p", withLimit(desc("", "x"), 1, typev3.RateLimitUnit_MINUTE))
	e.expect(t, "user=x with the same override", []string{"O:O"}, "p", withLimit(desc("user", "x"), 1, typev3.RateLimitUnit_MINUTE))
}
