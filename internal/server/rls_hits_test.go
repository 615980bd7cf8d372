package server_test

import (
	"context"
	"math"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHugeHitsAddend: hits_addend as large as a request can carry. A
// descriptor's own (a uint64) is taken up to 2^62 − 1, over any limit
// and counting nothing, alone or three times on one key in one request
// (their sum past int64), and given back (is_negative_hits) never below
// zero; past it the request is refused, naming the descriptor. The
// request's (a uint32) is at most 2^32 − 1. On Redis, whose scripts count
// in doubles, as in memory.
func TestHugeHitsAddend(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own

	const most = math.MaxInt64 / 2 // 2^62 − 1
	conf := `domain: p
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tb
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	for _, kind := range []string{"memory", "redis"} {
		e := startRLS(t, newStore(t, kind), writeConf(t, conf), envOpts{})
		for _, k := range []string{"fw", "tb"} {
			what := kind + " " + k
			e.expect(t, what+": hits_addend 2^62 − 1", []string{"X:X"}, "p", withHits(desc(k, "a"), most))
			e.expect(t, what+": three of 2^62 − 1 on one key", []string{"X:XXX"}, "p",
				withHits(desc(k, "a"), most), withHits(desc(k, "a"), most), withHits(desc(k, "a"), most))
			if r := e.call(t, "p", math.MaxUint32, desc(k, "a")); codesOf(r) != "X:X" {
				t.Errorf("%s: request hits_addend 2^32 − 1: %s, want X:X", what, codesOf(r))
			}
			e.expect(t, what+": 2^62 − 1 given back", []string{"O:O"}, "p", withNegative(withHits(desc(k, "a"), most)))
			if n := e.remaining(t, "p", k, "a"); n != 10 {
				t.Errorf("%s: %d remaining after them, want 10 (none counted, none given back below zero)", what, n)
			}
			_, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "p",
				Descriptors: []*descriptorPB{desc(k, "b"), withHits(desc(k, "a"), most+1)}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[1]: hits_addend 4611686018427387904 is too large") {
				t.Errorf("%s: hits_addend 2^62: %v, want INVALID_ARGUMENT naming descriptors[1]", what, err)
			}
		}
	}
}
