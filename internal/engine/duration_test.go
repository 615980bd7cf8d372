package engine_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
)

// TestDecisionDurationOncePerRequest: sluice_decision_duration_seconds
// observes each request decided once, with its store calls in it: a
// request only shadow rules apply to (what trying a rule on live traffic
// looks like), one with a shadow rule beside an enforcing one, and one
// held by action delay, which asks the store again after its wait.
func TestDecisionDurationOncePerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		watch := rule("watch", sluice.FixedWindow, sluice.PerHour(1), rules.Shadow, 0)
		strict := rule("strict", sluice.FixedWindow, sluice.PerHour(100), rules.Reject, 0)
		shaped := rule("shaped", sluice.TokenBucket, sluice.PerSecond(1).WithBurst(1), rules.Delay, 5*time.Second)
		e, reg := newEngine(t, "", nil, watch, strict, shaped)
		count := func() float64 {
			return metricstest.Gather(t, reg)["sluice_decision_duration_seconds_count"]
		}
		for i, c := range []struct {
			what  string
			ms    []rules.Match
			admit bool
		}{
			{"Decide, shadow rule only", []rules.Match{{Rule: watch, Key: "w"}}, false},
			{"Admit, shadow rule only", []rules.Match{{Rule: watch, Key: "w"}}, true},
			{"Admit, shadow and enforcing rules", []rules.Match{{Rule: watch, Key: "w"}, {Rule: strict, Key: "s"}}, true},
			{"Admit, delay rule with its slot free", []rules.Match{{Rule: shaped, Key: "d"}}, true},
			{"Admit, delay rule waiting 1s for its slot", []rules.Match{{Rule: shaped, Key: "d"}}, true},
		} {
			before := count()
			var res = e.Decide
			if c.admit {
				res = e.Admit
			}
			if r := res(context.Background(), c.ms, 1); !r.Allowed {
				t.Fatalf("%d %s: refused", i, c.what)
			}
			if got := count() - before; got != 1 {
				t.Errorf("%s: %v observations of sluice_decision_duration_seconds, want 1 (one per request)", c.what, got)
			}
		}
	})
}

// TestDelayObservedForEveryAdmission: sluice_delay_seconds is the time
// each request admitted under action delay waited, none included: a
// histogram of the waits without the requests that did not wait showed
// only those that did (a mean of 1s where one request in a hundred
// waited 1s), and no share of requests delayed.
func TestDelayObservedForEveryAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.TokenBucket, sluice.PerSecond(1).WithBurst(1), rules.Delay, 5*time.Second)
		e, reg := newEngine(t, "", nil, shaped)
		ms := []rules.Match{{Rule: shaped, Key: "d"}}
		for i := range 2 { // the first at once, the second after 1s
			if r := e.Admit(context.Background(), ms, 1); !r.Allowed || r.Waited != time.Duration(i)*time.Second {
				t.Fatalf("request %d: allowed %v after %v, want allowed after %ds", i, r.Allowed, r.Waited, i)
			}
		}
		got := metricstest.Gather(t, reg)
		if got["sluice_delay_seconds_count"] != 2 || got["sluice_delay_seconds_sum"] != 1 {
			t.Errorf("sluice_delay_seconds: %v observations summing to %vs, want 2 summing to 1s (one wait of 0, one of 1s)",
				got["sluice_delay_seconds_count"], got["sluice_delay_seconds_sum"])
		}
	})
}

// TestDescriptorsDurationOncePerRequest: an Envoy request is observed
// once in sluice_decision_duration_seconds, also when it takes a second
// round trip (a shadow_mode descriptor over its limit is left out and the
// others taken again).
func TestDescriptorsDurationOncePerRequest(t *testing.T) {
	s, err := descriptors.Parse("d.yaml", []byte(envoyConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, realClock := range []bool{false, true} { // the engine's clock, or time.Now (timed differently)
		clk := &clock{t: t0}
		now := clk.Now
		if realClock {
			now = nil
		}
		e, reg := newEngine(t, "", now)
		sh, g := [2]string{"soft", "a"}, [2]string{"global", "y"}
		count := func() float64 { return metricstest.Gather(t, reg)["sluice_decision_duration_seconds_count"] }
		decide(t, e, match(t, s, 1, sh)) // soft at its limit of 1
		before := count()
		if res, st := decide(t, e, match(t, s, 1, sh, g)); res.OverLimit || !st[0].Over {
			t.Fatalf("shadow over: overall over %v, statuses %+v; want OK with the shadow descriptor over", res.OverLimit, st)
		}
		if got := count() - before; got != 1 {
			t.Errorf("real clock %v: a request taken twice (its shadow descriptor over) observed %v times, want once", realClock, got)
		}
	}
}
