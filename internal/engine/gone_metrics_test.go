package engine_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
)

// TestClientGoneWhileHeldMetrics: what the metrics say of a request whose
// client went away while action delay held it. The limiter refused
// neither: it used to count denied under its delay rule. Admitted and
// waiting out its leaky bucket slot, every rule counts it allowed (its
// counts stay taken, a shadow rule's too, as for any admitted request;
// only the slot that has not left is given back); still waiting for room
// under another algorithm, nothing was taken and no rule has a verdict.
// Either way each of its rules counts it in
// sluice_clients_gone_total{stage="held"}. A request whose own deadline
// passed while held (its client still there) was refused by the wait's
// length: denied, and not gone.
func TestClientGoneWhileHeldMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(3), rules.Delay, 5*time.Second)
		hourly := rule("hourly", sluice.FixedWindow, sluice.PerHour(100), rules.Reject, 0)
		watch := rule("watch", sluice.FixedWindow, sluice.PerHour(100), rules.Shadow, 0)
		e, reg := newEngine(t, "", nil, shaped, hourly, watch)
		ms := []rules.Match{{Rule: shaped, Key: "s"}, {Rule: hourly, Key: "h"}, {Rule: watch, Key: "w"}}
		if res := e.Admit(context.Background(), ms, 1); !res.Allowed {
			t.Fatalf("first request: refused")
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		if res := e.Admit(ctx, ms, 1); res.Allowed || res.Err == nil || res.DeniedBy != nil {
			t.Fatalf("second request, gone during its delay: allowed %v, err %v, denied by %v; want ended, denied by none", res.Allowed, res.Err, res.DeniedBy)
		}
		wantCounts(t, "admitted, then gone while held", metricstest.Gather(t, reg), map[string]float64{
			`sluice_decisions_total{result="allowed",rule="shaped"}`:      2,
			`sluice_decisions_total{result="denied",rule="shaped"}`:       0,
			`sluice_decisions_total{result="allowed",rule="hourly"}`:      2,
			`sluice_decisions_total{result="allowed",rule="watch"}`:       2,
			`sluice_decisions_total{result="shadow_denied",rule="watch"}`: 0,
			`sluice_clients_gone_total{rule="shaped",stage="held"}`:       1,
			`sluice_clients_gone_total{rule="hourly",stage="held"}`:       1,
			`sluice_clients_gone_total{rule="watch",stage="held"}`:        1,
			`sluice_clients_gone_total{rule="shaped",stage="decision"}`:   0,
			`sluice_delay_given_back_total{rule="shaped"}`:                1,
		})
		// Its other rules' counts stay taken, the shadow rule's too.
		if res := e.Decide(context.Background(), ms[1:2], 0); res.Decision.Remaining != 98 {
			t.Errorf("hourly rule after 2 admitted requests, one gone: %d remaining, want 98", res.Decision.Remaining)
		}
		if res := e.Check(context.Background(), watch, "w", 0); res.Decision.Remaining != 98 {
			t.Errorf("shadow rule after 2 admitted requests, one gone: %d remaining, want 98", res.Decision.Remaining)
		}

		slow := rule("slow", sluice.FixedWindow, sluice.PerMinute(1), rules.Delay, 2*time.Minute)
		daily := rule("daily", sluice.FixedWindow, sluice.PerDay(100), rules.Reject, 0)
		e2, reg2 := newEngine(t, "", nil, slow, daily)
		ms2 := []rules.Match{{Rule: slow, Key: "k"}, {Rule: daily, Key: "d"}}
		e2.Admit(context.Background(), ms2, 1)
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(5*time.Second, cancel)
		if res := e2.Admit(ctx, ms2, 1); res.Allowed || res.Err == nil {
			t.Fatalf("request waiting for room, gone: allowed %v err %v; want ended", res.Allowed, res.Err)
		}
		wantCounts(t, "gone while waiting for room", metricstest.Gather(t, reg2), map[string]float64{
			`sluice_decisions_total{result="allowed",rule="slow"}`:  1,
			`sluice_decisions_total{result="denied",rule="slow"}`:   0,
			`sluice_decisions_total{result="allowed",rule="daily"}`: 1,
			`sluice_decisions_total{result="denied",rule="daily"}`:  0,
			`sluice_clients_gone_total{rule="slow",stage="held"}`:   1,
			`sluice_clients_gone_total{rule="daily",stage="held"}`:  1,
		})

		// Its deadline passed while held: refused by the wait, not gone.
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		res := e2.Admit(ctx, ms2, 1)
		cancel()
		if res.Allowed || res.Err == nil {
			t.Fatalf("request whose deadline passed while held: allowed %v err %v; want ended", res.Allowed, res.Err)
		}
		wantCounts(t, "deadline passed while held", metricstest.Gather(t, reg2), map[string]float64{
			`sluice_decisions_total{result="denied",rule="slow"}`: 1,
			`sluice_clients_gone_total{rule="slow",stage="held"}`: 1,
		})
	})
}

// TestClientGoneBeforeDecisionMetrics: a client gone before the store
// answered counts no verdict (no rule decided) and, under each of its
// rules, one sluice_clients_gone_total{stage="decision"}: through Admit,
// Decide (POST /v1/check's enforcing rules), Check of a shadow rule and
// Report (POST /v1/report).
func TestClientGoneBeforeDecisionMetrics(t *testing.T) {
	enforce := rule("enforce", sluice.FixedWindow, sluice.PerMinute(5), rules.Reject, 0)
	shadow := rule("would-be", sluice.FixedWindow, sluice.PerMinute(5), rules.Shadow, 0)
	e, reg := newContextEngine(t, "", enforce, shadow)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ms := []rules.Match{{Rule: enforce, Key: "e"}, {Rule: shadow, Key: "s"}}
	if res := e.Admit(ctx, ms, 1); res.Err == nil {
		t.Fatalf("Admit for a gone client: no Err")
	}
	if res := e.Decide(ctx, ms[:1], 1); res.Err == nil {
		t.Fatalf("Decide for a gone client: no Err")
	}
	if res := e.Check(ctx, shadow, "s", 1); res.Err == nil {
		t.Fatalf("Check of a shadow rule for a gone client: no Err")
	}
	if res := e.Report(ctx, enforce, "e", 1); res.Err == nil {
		t.Fatalf("Report for a gone client: no Err")
	}
	wantCounts(t, "gone before the decision", metricstest.Gather(t, reg), map[string]float64{
		`sluice_clients_gone_total{rule="enforce",stage="decision"}`:     3,
		`sluice_clients_gone_total{rule="would-be",stage="decision"}`:    2,
		`sluice_decisions_total{result="allowed",rule="enforce"}`:        0,
		`sluice_decisions_total{result="denied",rule="enforce"}`:         0,
		`sluice_decisions_total{result="allowed",rule="would-be"}`:       0,
		`sluice_decisions_total{result="shadow_denied",rule="would-be"}`: 0,
		`sluice_store_errors_total`:                                      0,
	})
}
