package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// TestShadowChargedByAdmittedRequestsOnly: denied traffic consumes
// nothing, a shadow rule's counter included. A shadow rule is tried on
// live traffic to learn what it would refuse once enforced; enforced, it
// would not be charged by the requests another rule refuses, so in
// shadow it must not be either, or it reports refusals its enforcement
// would never make. In a refused request it counts its own verdict
// without being charged, as an enforcing rule does (and as the Envoy
// service's shadow_mode descriptors do).
func TestShadowChargedByAdmittedRequestsOnly(t *testing.T) {
	clk := &clock{t: t0}
	strict := rule("strict", sluice.FixedWindow, sluice.PerHour(2), rules.Reject, 0)
	trial := rule("trial", sluice.FixedWindow, sluice.PerHour(5), rules.Shadow, 0)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: &rules.Set{Rules: []*rules.Rule{strict, trial}},
		Metrics: metrics.New(reg), Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	both := []rules.Match{{Rule: strict, Key: "s"}, {Rule: trial, Key: "t"}}
	for i := range 10 {
		if res := e.Admit(context.Background(), both, 1); res.Allowed != (i < 2) {
			t.Fatalf("request %d: allowed %v, want %v (strict admits 2)", i, res.Allowed, i < 2)
		}
	}
	// trial was charged by the 2 admitted requests only: 3 more fit.
	for range 4 {
		e.Admit(context.Background(), both[1:], 1)
	}
	// Both over their limits: each counts its own refusal, and the shadow
	// rule's log line (its first this second: the clock stands still
	// until now) tells no wait, having asked at cost 0.
	clk.Add(time.Second)
	e.Admit(context.Background(), both, 1)
	if l := logs.String(); !strings.Contains(l, "refused_anyway=true") || strings.Contains(l, "retry_after=0s") {
		t.Errorf("shadow log lines:\n%s\nwant the last one to say the request was refused anyway, and none a retry_after of 0", l)
	}
	wantCounts(t, "verdicts", metricstest.Gather(t, reg), map[string]float64{
		`sluice_decisions_total{result="allowed",rule="strict"}`:      2,
		`sluice_decisions_total{result="denied",rule="strict"}`:       9,
		`sluice_decisions_total{result="allowed",rule="trial"}`:       13, // 10 with strict (8 refused by it, trial under its limit), 3 alone
		`sluice_decisions_total{result="shadow_denied",rule="trial"}`: 2,  // the 4th alone, and the last
	})
	if res := e.Check(context.Background(), trial, "t", 0); res.Decision.Remaining != 0 {
		t.Errorf("trial's counter: %d remaining, want 0 (charged by the 5 admitted requests)", res.Decision.Remaining)
	}
}

// TestShadowShardedRefusedAnyway: in a request another rule refuses, a
// sharded shadow rule takes its verdict from what its shard has left, as
// the shard would decide once the rule enforces, not from the key's
// estimate (the shard's remainder times the shards): with 1 left of a
// shard's 3, a request of cost 2 is one the rule would refuse.
func TestShadowShardedRefusedAnyway(t *testing.T) {
	strict := rule("strict", sluice.FixedWindow, sluice.PerHour(2), rules.Reject, 0)
	trial := rule("trial", sluice.FixedWindow, sluice.PerHour(12), rules.Shadow, 0)
	trial.Shards = rules.AutoCount{N: 4}
	reg := prometheus.NewRegistry()
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: &rules.Set{Rules: []*rules.Rule{strict, trial}},
		Metrics: metrics.New(reg), Now: func() time.Time { return t0 },
		// Always the first shard, a quarter of the limit: 3 an hour.
		Shard: func(r *sluice.Request, n int) int {
			r.Key += "#0"
			r.Limit = sluice.PerHour(r.Limit.Rate / int64(n))
			return n
		}})
	if err != nil {
		t.Fatal(err)
	}
	both := []rules.Match{{Rule: strict, Key: "s"}, {Rule: trial, Key: "t"}}
	if res := e.Admit(context.Background(), both, 2); !res.Allowed {
		t.Fatalf("first request refused, want admitted (strict admits 2)")
	}
	if res := e.Admit(context.Background(), both, 2); res.Allowed {
		t.Fatalf("second request admitted, want refused by strict")
	}
	wantCounts(t, "the sharded shadow rule's verdicts", metricstest.Gather(t, reg), map[string]float64{
		`sluice_decisions_total{result="allowed",rule="trial"}`:       1, // the first: 3 left of its shard's 3
		`sluice_decisions_total{result="shadow_denied",rule="trial"}`: 1, // the second: 1 left of its shard's 3, cost 2
	})
}

// TestShadowLogDeferred: a shadow rule that would deny a request a defer
// rule queued logs that it was queued, once it is (Engine.Queued), not
// that it was refused anyway: the request is served, at its replay.
func TestShadowLogDeferred(t *testing.T) {
	clk := &clock{t: t0}
	jobs := rule("jobs", sluice.FixedWindow, sluice.PerHour(1), rules.Defer, 0)
	trial := rule("trial", sluice.FixedWindow, sluice.PerHour(1), rules.Shadow, 0)
	var logs bytes.Buffer
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: &rules.Set{Rules: []*rules.Rule{jobs, trial}},
		Metrics: metrics.New(prometheus.NewRegistry()), Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ms := []rules.Match{{Rule: jobs, Key: "j"}, {Rule: trial, Key: "t"}}
	if res := e.AdmitOrDefer(context.Background(), ms, 1); !res.Allowed {
		t.Fatalf("first: %+v, want allowed", res)
	}
	if res := e.AdmitOrDefer(context.Background(), ms, 1); res.Allowed || !res.Deferrable {
		t.Fatalf("second: allowed %v deferrable %v, want deferrable", res.Allowed, res.Deferrable)
	}
	e.Queued(context.Background(), ms, 1)
	l := logs.String()
	if strings.Contains(l, "refused_anyway") || !strings.Contains(l, `msg="shadow rule would deny" rule=trial key=t`) || !strings.Contains(l, "deferred=true") {
		t.Errorf("shadow log lines:\n%s\nwant one saying trial would deny the deferred request, none that it was refused anyway", l)
	}
}
