package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// stopBeforeTake is a store that stops the Redis server behind it just
// before the first take that is no report (no sluice.Request.Force): a
// call's report is charged on Redis, and its other descriptors find
// Redis gone.
type stopBeforeTake struct {
	sluice.Store
	stop func()
	once sync.Once
}

func (s *stopBeforeTake) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if !r.Force {
		s.once.Do(s.stop)
	}
	return s.Store.Take(ctx, r)
}

func (s *stopBeforeTake) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if !rs[0].Force {
		s.once.Do(s.stop)
	}
	return s.Store.TakeAll(ctx, rs, ds)
}

// TestReportRedisDownMidCall: a report: true descriptor charged on Redis,
// the call's other descriptor then finding Redis gone (stopped between
// the two round trips). The report is charged once and answered with its
// figures (it was decided); the other answers as on_error says (allow:
// OK, deny: OVER_LIMIT, local: decided in memory); no descriptor's hits
// are counted twice in sluice_envoy_hits_total, and under local the
// report, charged on Redis, is not charged in memory too (its local
// count is full). A report alone after that is charged in memory under
// local, and not at all under allow and deny (its hits are lost to the
// budget: nothing takes them to Redis later).
func TestReportRedisDownMidCall(t *testing.T) {
	const conf = `domain: llm
descriptors:
  - key: tokens
    report: true
    algorithm: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	for _, onError := range []string{"allow", "deny", "local"} {
		t.Run(onError, func(t *testing.T) {
			srv := redistest.StartServer(t)
			rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rs.Close)
			var st sluice.Store = &stopBeforeTake{Store: rs, stop: srv.Stop}
			if onError == "local" {
				fb := fleet.NewFallback(st, fleet.FallbackOptions{ExpectedInstances: 1, Probe: rs.Ping})
				t.Cleanup(fb.Close)
				st = fb
			}
			e := startRLS(t, st, writeConf(t, conf), envOpts{onError: onError})
			r := e.call(t, "llm", 0, withHits(desc("tokens", "t"), 30), desc("user", "ann"))
			want := map[string]string{"allow": "O:OO", "deny": "X:OX", "local": "O:OO"}[onError]
			if codesOf(r) != want {
				t.Fatalf("a report charged, then Redis gone: %s, want %s (statuses %v)", codesOf(r), want, r.Statuses)
			}
			if s := r.Statuses[0]; s.CurrentLimit == nil || s.LimitRemaining != 70 {
				t.Errorf("the report's status %v; want its figures, 70 of 100 left (charged once, on Redis)", s)
			}
			if s := r.Statuses[1]; onError == "local" && (s.CurrentLimit == nil || s.LimitRemaining != 1) {
				t.Errorf("under local, the user's status %v; want decided in memory, 1 of 2 left", s)
			}
			m := metricstest.Gather(t, e.reg)
			if got := m[`sluice_envoy_hits_total{descriptor="tokens",domain="llm"}`]; got != 30 {
				t.Errorf("the report's hits counted %v, want 30 (once)", got)
			}
			if got := m[`sluice_envoy_hits_total{descriptor="user",domain="llm"}`]; got != 1 {
				t.Errorf("the user's hits counted %v, want 1 (once)", got)
			}
			if got, want := m["sluice_store_errors_total"], map[string]float64{"allow": 1, "deny": 1, "local": 0}[onError]; got != want {
				t.Errorf("store errors %v, want %v", got, want)
			}
			if onError == "local" {
				// In memory now: the report's count holds nothing of the
				// 30 charged on Redis.
				if left := e.remaining(t, "llm", "tokens", "t"); left != 100 {
					t.Errorf("the report's local count: %d left, want 100 (charged on Redis only)", left)
				}
			}
			// A report alone with Redis gone: charged in memory under
			// local; else not charged at all, answered as on_error says,
			// with no figures, its hits counted as asked.
			r = e.call(t, "llm", 0, withHits(desc("tokens", "t"), 30))
			want = map[string]string{"allow": "O:O", "deny": "X:X", "local": "O:O"}[onError]
			if codesOf(r) != want {
				t.Fatalf("a report with Redis gone: %s, want %s", codesOf(r), want)
			}
			if s := r.Statuses[0]; onError == "local" && s.LimitRemaining != 70 || onError != "local" && s.CurrentLimit != nil {
				t.Errorf("a report with Redis gone: status %v; want 70 left in memory under local, else no figures", s)
			}
			m = metricstest.Gather(t, e.reg)
			if got := m[`sluice_envoy_hits_total{descriptor="tokens",domain="llm"}`]; got != 60 {
				t.Errorf("the report's hits counted %v, want 60", got)
			}
		})
	}
}
