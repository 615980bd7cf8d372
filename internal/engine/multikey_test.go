package engine_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
)

// A rule counted under several keys in one request (a key part sent with
// several values: rules.Set.Match lists one Match per value, in a row)
// charges every key, all or nothing, and counts one verdict per request:
// allowed only when every key was. A shadow rule counts one verdict too.
func TestDecideRuleUnderSeveralKeys(t *testing.T) {
	clk := &clock{t: t0}
	r := rule("per-cookie", sluice.FixedWindow, sluice.PerMinute(2), rules.Reject, 0)
	sh := rule("shadow", sluice.FixedWindow, sluice.PerMinute(1), rules.Shadow, 0)
	e, reg := newEngine(t, "", clk.Now, r, sh)
	both := func(a, b string) []rules.Match {
		return []rules.Match{{Rule: r, Key: a}, {Rule: r, Key: b}, {Rule: sh, Key: "shadow|" + a}, {Rule: sh, Key: "shadow|" + b}}
	}
	ctx := context.Background()
	if res := e.Decide(ctx, both("a", "b"), 1); !res.Allowed || res.Decision.Remaining != 1 {
		t.Fatalf("a+b: allowed %v remaining %d, want allowed with 1 left", res.Allowed, res.Decision.Remaining)
	}
	if res := e.Decide(ctx, both("a", "c"), 1); !res.Allowed || res.Decision.Remaining != 0 {
		t.Fatalf("a+c: allowed %v remaining %d, want allowed with 0 left (a's last)", res.Allowed, res.Decision.Remaining)
	}
	// a is spent: a request carrying it beside a fresh d is refused, and
	// d is not charged (all or nothing).
	if res := e.Decide(ctx, both("d", "a"), 1); res.Allowed || res.DeniedBy != r {
		t.Fatalf("d+a, a spent: allowed %v denied by %v, want denied by per-cookie", res.Allowed, res.DeniedBy)
	}
	if res := e.Decide(ctx, []rules.Match{{Rule: r, Key: "d"}}, 1); !res.Allowed || res.Decision.Remaining != 1 {
		t.Fatalf("d alone after the refusal: allowed %v remaining %d, want allowed with 1 left (not charged before)", res.Allowed, res.Decision.Remaining)
	}
	m := metricstest.Gather(t, reg)
	for k, want := range map[string]float64{
		`sluice_decisions_total{result="allowed",rule="per-cookie"}`:   3,
		`sluice_decisions_total{result="denied",rule="per-cookie"}`:    1,
		`sluice_decisions_total{result="allowed",rule="shadow"}`:       1,
		`sluice_decisions_total{result="shadow_denied",rule="shadow"}`: 2,
	} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v (one verdict per request)", k, m[k], want)
		}
	}
}

// DeniedKey names the key that denied a request the rule counted under
// several keys (where the proxy queues a deferred request): the spent one,
// not the last; when several denied, the first of them in match order.
func TestDeniedKeyOfSeveral(t *testing.T) {
	clk := &clock{t: t0}
	r := rule("per-cookie", sluice.FixedWindow, sluice.PerMinute(1), rules.Defer, 0)
	e, _ := newEngine(t, "", clk.Now, r)
	ctx := context.Background()
	keys := func(ks ...string) []rules.Match {
		ms := make([]rules.Match, len(ks))
		for i, k := range ks {
			ms[i] = rules.Match{Rule: r, Key: k}
		}
		return ms
	}
	for _, k := range []string{"a", "b"} { // spend a and b
		if res := e.Decide(ctx, keys(k), 1); !res.Allowed {
			t.Fatalf("%s alone: denied, want allowed", k)
		}
	}
	for _, tc := range []struct {
		ks   []string
		want string
	}{
		{[]string{"a", "fresh"}, "a"},
		{[]string{"fresh", "a"}, "a"},
		{[]string{"fresh", "b", "a"}, "b"},
		{[]string{"a", "b"}, "a"},
	} {
		res := e.Decide(ctx, keys(tc.ks...), 1)
		if res.Allowed || !res.Deferrable || res.DeniedBy != r || res.DeniedKey != tc.want {
			t.Errorf("Decide(%v): allowed %v deferrable %v denied by %v key %q; want deferrable, denied by per-cookie under %q",
				tc.ks, res.Allowed, res.Deferrable, res.DeniedBy, res.DeniedKey, tc.want)
		}
	}
}
