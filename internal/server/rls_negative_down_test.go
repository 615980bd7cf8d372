package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestNegativeHitsRedisDown: a refund (is_negative_hits) the store cannot
// make, the Redis server stopped, never denies whatever store.on_error
// says: its status is OK, with no current_limit nor figures (nothing is
// known of its counter), and it adds no rate-limit headers, so that a
// refund lost to an outage neither refuses the caller nor tells it that
// nothing is left. It is a store error (sluice_store_errors_total), no
// fallback (it decides nothing); its hits, asked back, are counted in
// sluice_envoy_negative_hits_total as the hits of a call the store could
// not decide are in sluice_envoy_hits_total; and logged, with its key and
// the hits that stay counted. Under local, the failed
// refund moves the store to memory, where the call's other descriptor is
// decided and gives the headers, and the next refund, of hits memory did
// not count, is dropped. Under grpc.on_error: unavailable, a call
// of refunds alone is answered OK, not UNAVAILABLE (which Envoy's
// failure_mode_deny: true would turn into a denial).
func TestNegativeHitsRedisDown(t *testing.T) {
	back := func() *descriptorPB { return withNegative(withHits(desc("user", "ann"), 1)) }
	noFigures := func(t *testing.T, what string, s *rlsv3.RateLimitResponse_DescriptorStatus) {
		t.Helper()
		if s.Code != rlsv3.RateLimitResponse_OK || s.CurrentLimit != nil || s.LimitRemaining != 0 || s.DurationUntilReset != nil {
			t.Errorf("%s: the refund's status is %v; want OK with no current_limit nor figures", what, s)
		}
	}
	for _, onError := range []string{"deny", "allow", "local", "unavailable"} {
		t.Run(onError, func(t *testing.T) {
			srv := redistest.StartServer(t)
			rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rs.Close)
			var st sluice.Store = rs
			var fb *fleet.Fallback
			if onError == "local" {
				fb = fleet.NewFallback(rs, fleet.FallbackOptions{ExpectedInstances: 1, Probe: rs.Ping})
				t.Cleanup(fb.Close)
				st = fb
			}
			logs := new(redistest.SyncBuffer)
			o := envOpts{onError: onError, headers: true, log: slog.New(slog.NewTextHandler(logs, nil))}
			if onError == "unavailable" {
				o.onError, o.unavailable = "deny", true
			}
			e := startRLS(t, st, writeConf(t, plainConf), o)
			e.expect(t, "ann to the limit", []string{"O:O", "O:O"}, "web", desc("user", "ann"))
			srv.Stop()
			if onError == "local" {
				// The refund fails on Redis; the global descriptor is
				// decided in memory: 99 of 100 left.
				r := e.call(t, "web", 0, desc("global", "g"), back())
				if codesOf(r) != "O:OO" {
					t.Fatalf("a refund with Redis down beside a descriptor decided locally: %s, want O:OO", codesOf(r))
				}
				noFigures(t, "beside a descriptor decided locally", r.Statuses[1])
				if h := headerMap(r); h["RateLimit-Remaining"] != "99" || h["RateLimit-Limit"] != "100" {
					t.Errorf("headers %v; want the global descriptor's (RateLimit-Remaining 99 of 100), not the refund's", h)
				}
				// In local mode now: memory counted none of ann's hits,
				// so the refund is dropped (Redis counts them), answered
				// with the local count (2 of 2 left); no store error.
				if r := e.call(t, "web", 0, back()); codesOf(r) != "O:O" || r.Statuses[0].CurrentLimit == nil || r.Statuses[0].LimitRemaining != 2 {
					t.Errorf("a refund in local mode: %s, %v; want O:O with 2 left (the local count)", codesOf(r), r.Statuses[0])
				}
				if got := fb.RefundsDropped(); got != 1 {
					t.Errorf("refunds dropped in local mode: %d, want 1 (the hit Redis counts)", got)
				}
			} else {
				r := e.call(t, "web", 0, back())
				if codesOf(r) != "O:O" {
					t.Fatalf("a refund alone with Redis down: %s, want O:O", codesOf(r))
				}
				noFigures(t, "alone", r.Statuses[0])
				if len(r.ResponseHeadersToAdd) != 0 {
					t.Errorf("a refund alone with Redis down added headers %v; want none (nothing is known)", headerMap(r))
				}
				// Beside a descriptor the store could not decide: that one
				// answers as on_error says, the refund OK.
				req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*descriptorPB{desc("user", "bob"), back()}}
				r, err := e.client.ShouldRateLimit(context.Background(), req)
				if onError == "unavailable" {
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("a refund beside a descriptor with Redis down, unavailable: %v %v, want UNAVAILABLE", r, err)
					}
				} else {
					want := map[string]string{"deny": "X:XO", "allow": "O:OO"}[onError]
					if err != nil || codesOf(r) != want {
						t.Fatalf("a refund beside a descriptor with Redis down: %v %v, want %s", r, err, want)
					}
					noFigures(t, "beside an undecided descriptor", r.Statuses[1])
				}
			}
			// The first failure logged (the clock stands still: the
			// others are suppressed) is the refund's, with what it leaves
			// counted.
			if lines := logtest.Matching(logs.Lines(), "level=WARN"); len(lines) == 0 || !strings.Contains(lines[0], `msg="store could not give back negative hits: they stay counted"`) ||
				!strings.Contains(lines[0], "hits=1") || !strings.Contains(lines[0], `key=`) || !strings.Contains(lines[0], "ann") {
				t.Errorf("logged %q; want first the refund that failed, with its key and hits=1", lines)
			}
			m := metricstest.Gather(t, e.reg)
			errs, fallbacks, given := 3.0, 1.0, 2.0 // the refund alone, then the refund and the take
			if onError == "local" {
				errs, fallbacks, given = 1, 0, 2 // the second refund made in memory
			}
			policy := map[string]string{"local": "allow", "unavailable": "deny"}[onError]
			if policy == "" {
				policy = onError
			}
			if got := m["sluice_store_errors_total"]; got != errs {
				t.Errorf("store errors %v, want %v (each failed refund, each failed take)", got, errs)
			}
			if got := m[`sluice_store_fallback_total{policy="`+policy+`"}`]; got != fallbacks {
				t.Errorf("fallbacks %v, want %v (a refund is no decision on_error answers)", got, fallbacks)
			}
			if got := m[`sluice_envoy_negative_hits_total{descriptor="user",domain="web"}`]; got != given {
				t.Errorf("negative hits counted %v, want %v (asked back, given back or not)", got, given)
			}
			kept := 2.0 // ann's hits the store could not take back, each refund's one
			if onError == "local" {
				kept = 1 // the second was made in memory (dropped there, counted apart)
			}
			if got := m[`sluice_envoy_negative_hits_failed_total{descriptor="user",domain="web"}`]; got != kept {
				t.Errorf("negative hits the store could not give back %v, want %v", got, kept)
			}
		})
	}
}

func headerMap(r *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, x := range r.ResponseHeadersToAdd {
		h[x.Key] = x.Value
	}
	return h
}

// refundDown is a memory store whose refunds fail as a store that is down
// does: the only way to have a refund fail while the call's takes are
// decided (on Redis, a node of a Cluster down, or a blip between calls).
type refundDown struct{ *memstore.Store }

func (refundDown) Refund(context.Context, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, fmt.Errorf("down: %w", sluice.ErrStoreUnavailable)
}

// TestHeadersBesideAFailedQuotaRefund: a quota_mode descriptor whose
// refund failed is still one of the request's quota descriptors, never
// over, as when its refund is made: a quota descriptor over beside it
// denies nothing, so the headers are those of the descriptor that denies
// (h: reset and Retry-After 30), not the over quota's (3570).
func TestHeadersBesideAFailedQuotaRefund(t *testing.T) {
	e := startRLS(t, refundDown{memstore.New(memstore.Options{})}, writeConf(t, `domain: p
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
	e.expect(t, "q and h to their limit", []string{"O:OO"}, "p", desc("q", "x"), desc("h", "x"))
	r := e.call(t, "p", 0, desc("q", "x"), withNegative(desc("q2", "x")), desc("h", "x"))
	if codesOf(r) != "X:XOX" {
		t.Fatalf("q and h over, q2's refund failed: %s, want X:XOX", codesOf(r))
	}
	if h := headerMap(r); h["RateLimit-Limit"] != "1" || h["RateLimit-Reset"] != "30" || h["Retry-After"] != "30" {
		t.Errorf("headers = %v, want h's: limit 1, reset and Retry-After 30", h)
	}
}

// refundsFailFrom is a Redis store whose refunds fail from the from-th on,
// as when the Cluster node of a shard goes down while a refund is spread
// over the shards.
type refundsFailFrom struct {
	*redisstore.Store
	calls atomic.Int32
	from  int32
}

func (s *refundsFailFrom) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.calls.Add(1) >= s.from {
		return sluice.Decision{}, fmt.Errorf("down: %w", sluice.ErrStoreUnavailable)
	}
	return s.Store.Refund(ctx, r)
}

// TestNegativeHitsShardedPartlyFailed: a refund of 3 hits spread over 3
// shards (one counted on each), whose second shard's refund fails: the
// first shard's hit is given back, and the log line says so, with the 2
// hits that stay counted, not the 3 asked.
func TestNegativeHitsShardedPartlyFailed(t *testing.T) {
	const conf = `domain: d
descriptors:
  - key: sharded
    shards: 3
    rate_limit: {unit: minute, requests_per_unit: 30}
`
	rs := newStore(t, "redis").(*redisstore.Store)
	st := &refundsFailFrom{Store: rs, from: 2}
	logs := new(redistest.SyncBuffer)
	e := startRLS(t, st, writeConf(t, conf), envOpts{shard: rs.Shard, spread: rs.Spread, shards: rs.Shards, log: slog.New(slog.NewTextHandler(logs, nil))})
	e.expect(t, "a hit on each shard", []string{"O:O", "O:O", "O:O"}, "d", desc("sharded", "s"))
	r := e.call(t, "d", 0, withNegative(withHits(desc("sharded", "s"), 3)))
	if codesOf(r) != "O:O" || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("a refund that failed on its second shard: %s, %v; want O:O without figures", codesOf(r), r.Statuses[0])
	}
	lines := logtest.Matching(logs.Lines(), "could not give back")
	if len(lines) != 1 || !strings.Contains(lines[0], " hits=2 ") || !strings.Contains(lines[0], " given_back=1 ") {
		t.Errorf("logged %q; want one line with hits=2 (staying counted) and given_back=1", lines)
	}
	// 2 of the 3 hits still counted: 28 of 30 left over the shards.
	var left uint32
	for range 3 {
		left += e.remaining(t, "d", "sharded", "s") / 3
	}
	if left != 28 {
		t.Errorf("after the partial refund, the shards hold %d left, want 28 (one hit given back)", left)
	}
}
