package server_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/memstore"
)

// Requests as a client of the proxy can shape them: the descriptor values
// Envoy builds from its request (headers, path, address) are the
// client's bytes, as many as Envoy takes. A call Sluice fails is let
// through by Envoy's default failure_mode_deny: false, past every
// descriptor of the request, so that whatever a client can put in a value
// must be decided, not refused.

// envoyHeaderBytes is Envoy's default bound on a request's headers
// (max_request_headers_kb: 60): the largest value a client can have
// Envoy copy into a descriptor.
const envoyHeaderBytes = 60 << 10

// TestEnvoySizedRequestDecided: a route whose every rate limit carries
// the same header (MaxDescriptors of them) has Envoy send that header's
// value in each descriptor: with a 60 KiB value, 3.75 MiB. Such a request
// is decided, the route's global limit counted with it, where one past
// 1 MiB was refused with RESOURCE_EXHAUSTED (and so let through, its
// global limit uncounted); the reference service takes up to 4 MiB. A
// request past 4 MiB is still refused.
func TestEnvoySizedRequestDecided(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	big := make([]*descriptorPB, 0, server_MaxDescriptors)
	for i := range server_MaxDescriptors - 1 {
		big = append(big, desc("user", fmt.Sprintf("%02d", i)+strings.Repeat("v", envoyHeaderBytes-2)))
	}
	big = append(big, desc("global", "all"))
	r, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: big})
	if err != nil {
		t.Fatalf("%d descriptors of a 60 KiB value: %v, want an answer", len(big), err)
	}
	if want := "O:" + strings.Repeat("O", len(big)); codesOf(r) != want {
		t.Errorf("%d descriptors of a 60 KiB value: %s, want %s", len(big), codesOf(r), want)
	}
	if got := e.remaining(t, "web", "global", "all"); got != 99 {
		t.Errorf("global remaining after it = %d, want 99 (the request counted)", got)
	}
	_, err = e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web",
		Descriptors: []*descriptorPB{desc("user", strings.Repeat("x", 4<<20))}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 4 MiB value: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// BenchmarkEnvoySizedRequest is the cost of the largest request Envoy
// sends with its default header bound (TestEnvoySizedRequestDecided's,
// 3.75 MiB) over a real gRPC connection, on the memory store.
func BenchmarkEnvoySizedRequest(b *testing.B) {
	e := startRLS(b, memstore.New(memstore.Options{}), writeConf(b, "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"), envOpts{})
	req := &rlsv3.RateLimitRequest{Domain: "web"}
	for i := range server_MaxDescriptors {
		req.Descriptors = append(req.Descriptors, desc("user", fmt.Sprintf("%02d", i)+strings.Repeat("v", envoyHeaderBytes-2)))
	}
	b.SetBytes(int64(server_MaxDescriptors * envoyHeaderBytes))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.client.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDescriptorsNeverShareACounter: no two different descriptors share a
// counter, however their values are spelled: with the separators of the
// store keys ("|", ":", the length prefixes), NUL, the Redis hash tag's
// braces and escape, the prefix of the keys, the spelling of a long
// value's hash, values long enough to be hashed that differ in one byte;
// nor a descriptor and the same in another domain, nor under a limit
// override. Each is called once under a limit of 1 a minute: a second
// descriptor counted in the counter of an earlier one is over.
func TestDescriptorsNeverShareACounter(t *testing.T) {
	const conf = `domain: %s
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a|b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: "a:b"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: "1:a"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: w
    value: "x*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	long := strings.Repeat("x", 600)
	hash := "#" + strings.Repeat("0", 64)
	ds := []*descriptorPB{
		desc("a", "b|c"), desc("a|b", "c"), desc("a", "b:c"), desc("a:b", "c"),
		desc("a", "1:b"), desc("a", "b1:"), desc("1:a", "1:b"), desc("a", "1:a1:b"),
		desc("a", ""), desc("a", "\x00"), desc("a", "\x00\x00"), desc("a", "envoy:"), desc("a", "|"),
		desc("a", "}"), desc("a", ")"), desc("a", `\)`), desc("a", `\}`), desc("a", "{"), desc("a", "{a}"),
		desc("a", hash), desc("a", long), desc("a", long[1:]+"y"), desc("a", long+"\x00"),
		desc("a", "b", "b", "c"), desc("a", "b\x00", "b", "c"), desc("a", "b", "b", "c\x00"),
		desc("a", "1:b1:c"), desc("w", "x"),
		withLimit(desc("a", "b|c"), 1, typev3.RateLimitUnit_MINUTE),
		withLimit(desc("a", "b|c"), 1, typev3.RateLimitUnit_HOUR),
		withLimit(desc("a|b", "c"), 1, typev3.RateLimitUnit_MINUTE),
	}
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			e := startRLS(t, newStore(t, kind), writeConf(t, fmt.Sprintf(conf, "p"), fmt.Sprintf(conf, "q")), envOpts{})
			for _, domain := range []string{"p", "q"} {
				for _, d := range ds {
					r := e.call(t, domain, 0, d)
					if codesOf(r) != "O:O" || r.Statuses[0].CurrentLimit == nil {
						t.Errorf("%s %q: %s %v, want OK under its own limit, counted alone", domain, d.Entries, codesOf(r), r.Statuses[0])
					}
				}
			}
			// Every one was counted: again, each is over.
			for _, d := range ds {
				if r := e.call(t, "p", 0, d); codesOf(r) != "X:X" {
					t.Errorf("p %q again: %s, want over its limit", d.Entries, codesOf(r))
				}
			}
			// The shared wildcard counts every matching value in one.
			if r := e.call(t, "p", 0, desc("w", "x"+long)); codesOf(r) != "X:X" {
				t.Errorf("w=x…: %s, want over, in the counter of w=x", codesOf(r))
			}
		})
	}
}

// TestOverrideOnUnlimited: a limit override bypasses the config, an
// unlimited descriptor's included, as in the reference service (which
// looks up the override before the config): the override limits it. An
// override of 0 refuses it; one of 2^32 − 1 admits it, counted.
func TestOverrideOnUnlimited(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf+"  - key: free\n    rate_limit: {unlimited: true}\n"), envOpts{})
	e.expect(t, "unlimited, 1 a minute by override", []string{"O:O", "X:X"}, "web", withLimit(desc("free", "a"), 1, typev3.RateLimitUnit_MINUTE))
	e.expect(t, "unlimited, 0 by override", []string{"X:X"}, "web", withLimit(desc("free", "b"), 0, typev3.RateLimitUnit_MINUTE))
	r := e.call(t, "web", 0, withLimit(desc("free", "c"), math.MaxUint32, typev3.RateLimitUnit_SECOND))
	if codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != math.MaxUint32-1 {
		t.Errorf("unlimited, 2^32 − 1 a second by override: %s %v, want OK with 2^32 − 2 left", codesOf(r), r.Statuses[0])
	}
	if r := e.call(t, "web", 0, desc("free", "a")); codesOf(r) != "O:O" || r.Statuses[0].LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited without the override: %s %v, want OK, unlimited", codesOf(r), r.Statuses[0])
	}
}
