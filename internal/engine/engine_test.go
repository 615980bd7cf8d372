package engine_test

import (
	"context"
	"errors"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func rule(name string, alg sluice.Algorithm, l sluice.Limit, act rules.Action, maxDelay time.Duration) *rules.Rule {
	return &rules.Rule{Name: name, Algorithm: alg, Limit: l, Action: act, MaxDelay: maxDelay}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newEngine(t testing.TB, onError string, now func() time.Time, rs ...*rules.Rule) (*engine.Engine, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: &rules.Set{Rules: rs},
		OnError: onError, Metrics: metrics.New(reg), Now: now})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	return e, reg
}

// newContextEngine is newEngine over a memstore that answers as a store
// over the network does when the caller's context ends first
// (sluicetest.ContextStore): an error, nothing taken.
func newContextEngine(t testing.TB, onError string, rs ...*rules.Rule) (*engine.Engine, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, err := engine.New(engine.Options{Store: sluicetest.ContextStore(memstore.New(memstore.Options{})), Rules: &rules.Set{Rules: rs},
		OnError: onError, Metrics: metrics.New(reg)})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	return e, reg
}

// wantCounts checks the series of got named in want (absent counts 0).
func wantCounts(t *testing.T, what string, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v, want %v", what, k, got[k], v)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := engine.New(engine.Options{}); err == nil {
		t.Errorf("engine.New without a store: nil error, want one")
	}
	if _, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), OnError: "maybe"}); err == nil {
		t.Errorf("engine.New(OnError maybe): nil error, want one")
	}
}

func TestDecideOneRule(t *testing.T) {
	clk := &clock{t: t0}
	login := rule("login", sluice.FixedWindow, sluice.PerMinute(2), rules.Reject, 0)
	e, _ := newEngine(t, "", clk.Now, login)
	ms := []rules.Match{{Rule: login, Key: "login|1.2.3.4"}}
	for i, step := range []struct {
		at            time.Duration
		allowed       bool
		remaining     int64
		retryAfter    time.Duration
		wantDeniedBy  bool
		wantRuleIsSet bool
	}{
		{0, true, 1, 0, false, true},
		{10 * time.Second, true, 0, 0, false, true},
		{20 * time.Second, false, 0, 40 * time.Second, true, true},
		{60 * time.Second, true, 1, 0, false, true},
	} {
		clk.Set(t0.Add(step.at))
		res := e.Decide(context.Background(), ms, 1)
		if res.Allowed != step.allowed || res.Decision.Remaining != step.remaining || res.Decision.RetryAfter != step.retryAfter {
			t.Errorf("step %d: Decide at t0+%v = allowed %v remaining %d retry %v, want %v %d %v", i, step.at,
				res.Allowed, res.Decision.Remaining, res.Decision.RetryAfter, step.allowed, step.remaining, step.retryAfter)
		}
		if (res.DeniedBy == login) != step.wantDeniedBy || res.Rule != login {
			t.Errorf("step %d: DeniedBy %v Rule %v", i, res.DeniedBy, res.Rule)
		}
	}
}

// A request denied by one rule consumes nothing from the others, and the
// headers carry the tightest rule.
func TestDecideSeveralRules(t *testing.T) {
	clk := &clock{t: t0}
	wide := rule("wide", sluice.TokenBucket, sluice.PerMinute(10), rules.Reject, 0)
	narrow := rule("narrow", sluice.SlidingWindowLog, sluice.PerMinute(1), rules.Reject, 0)
	e, reg := newEngine(t, "", clk.Now, wide, narrow)
	both := []rules.Match{{Rule: wide, Key: "w|k"}, {Rule: narrow, Key: "n|k"}}
	onlyWide := both[:1]

	res := e.Decide(context.Background(), both, 1)
	if !res.Allowed || res.Rule != narrow || res.Decision.Remaining != 0 {
		t.Fatalf("first Decide(both) = allowed %v rule %v remaining %d; want allowed, narrow (tightest, 0 left)", res.Allowed, res.Rule.Name, res.Decision.Remaining)
	}
	res = e.Decide(context.Background(), both, 1)
	if res.Allowed || res.DeniedBy != narrow {
		t.Fatalf("second Decide(both) = allowed %v denied by %v; want denied by narrow", res.Allowed, res.DeniedBy)
	}
	// wide had 9 left after the first request; the denied one took none.
	res = e.Decide(context.Background(), onlyWide, 1)
	if !res.Allowed || res.Decision.Remaining != 8 {
		t.Errorf("Decide(wide) after a denied request: allowed %v remaining %d, want allowed with 8 left (the denied request consumed nothing)", res.Allowed, res.Decision.Remaining)
	}
	got := metricstest.Gather(t, reg)
	for name, want := range map[string]float64{
		`sluice_decisions_total{result="allowed",rule="wide"}`:   3,
		`sluice_decisions_total{result="allowed",rule="narrow"}`: 1,
		`sluice_decisions_total{result="denied",rule="narrow"}`:  1,
		`sluice_decision_duration_seconds_count`:                 3,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

func TestTightestTieGoesToLongestReset(t *testing.T) {
	clk := &clock{t: t0}
	// Both have 2 left after one request; the hourly one resets later.
	perMin := rule("per-min", sluice.FixedWindow, sluice.PerMinute(3), rules.Reject, 0)
	perHour := rule("per-hour", sluice.FixedWindow, sluice.PerHour(3), rules.Reject, 0)
	e, _ := newEngine(t, "", clk.Now, perMin, perHour)
	res := e.Decide(context.Background(), []rules.Match{{Rule: perMin, Key: "a"}, {Rule: perHour, Key: "b"}}, 1)
	if res.Rule != perHour || res.Decision.Remaining != 2 {
		t.Errorf("Decide: Rule %s remaining %d, want per-hour with 2", res.Rule.Name, res.Decision.Remaining)
	}
	rec := httptest.NewRecorder()
	res.SetHeaders(rec.Header())
	if got := rec.Header().Get("RateLimit-Policy"); got != `"per-hour";q=3;w=3600` {
		t.Errorf("SetHeaders: RateLimit-Policy %q, want the per-hour policy", got)
	}
}

func TestShadowNeverBlocks(t *testing.T) {
	clk := &clock{t: t0}
	enforce := rule("enforce", sluice.GCRA, sluice.PerMinute(100), rules.Reject, 0)
	shadow := rule("would-be", sluice.FixedWindow, sluice.PerMinute(1), rules.Shadow, 0)
	e, reg := newEngine(t, "", clk.Now, enforce, shadow)
	ms := []rules.Match{{Rule: enforce, Key: "e"}, {Rule: shadow, Key: "s"}}
	for i := range 3 {
		res := e.Decide(context.Background(), ms, 1)
		if !res.Allowed || res.Rule != enforce {
			t.Errorf("request %d: allowed %v rule %v, want allowed with the enforcing rule's headers", i, res.Allowed, res.Rule)
		}
	}
	res := e.Decide(context.Background(), ms[1:], 1)
	if !res.Allowed || res.Rule != nil {
		t.Errorf("shadow only: allowed %v rule %v, want allowed and no headers", res.Allowed, res.Rule)
	}
	got := metricstest.Gather(t, reg)
	if got[`sluice_decisions_total{result="shadow_denied",rule="would-be"}`] != 3 ||
		got[`sluice_decisions_total{result="allowed",rule="would-be"}`] != 1 ||
		got[`sluice_decisions_total{result="allowed",rule="enforce"}`] != 3 {
		t.Errorf("metrics after 4 requests: %v; want would-be 1 allowed, 3 shadow_denied; enforce 3 allowed", got)
	}
}

func TestStoreErrorPolicy(t *testing.T) {
	clk := &clock{t: t0}
	r := rule("r", sluice.TokenBucket, sluice.PerSecond(5), rules.Reject, 0)
	for _, tc := range []struct {
		onError    string
		allowed    bool
		wantStatus int
	}{{"allow", true, 0}, {"deny", false, 503}} {
		e, reg := newEngine(t, tc.onError, clk.Now, r)
		// A negative cost makes the real store refuse to decide.
		res := e.Decide(context.Background(), []rules.Match{{Rule: r, Key: "k"}}, -1)
		if res.Allowed != tc.allowed || res.StoreErr == nil || !errors.Is(res.StoreErr, sluice.ErrInvalidCost) {
			t.Errorf("on_error %s: Decide = allowed %v err %v, want allowed %v with the store's error", tc.onError, res.Allowed, res.StoreErr, tc.allowed)
		}
		if tc.wantStatus != 0 {
			rec := httptest.NewRecorder()
			engine.WriteDenied(rec, &res, 429)
			if rec.Code != tc.wantStatus || rec.Body.String() != "{\"error\":\"store_unavailable\"}\n" {
				t.Errorf("on_error %s: WriteDenied = %d %q, want %d store_unavailable", tc.onError, rec.Code, rec.Body, tc.wantStatus)
			}
		}
		got := metricstest.Gather(t, reg)
		if got["sluice_store_errors_total"] != 1 || got[`sluice_store_fallback_total{policy="`+tc.onError+`"}`] != 1 {
			t.Errorf("on_error %s: metrics %v, want 1 store error and 1 fallback", tc.onError, got)
		}
	}
}

// The delay action with a leaky bucket shapes a burst: requests leave
// period/rate apart, and those beyond the queue or max_delay get 429.
func TestAdmitLeakyBucketShapesBurst(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxDelay time.Duration
		want     []time.Duration // when each request of a burst of 5 passes; -1: denied
	}{
		{"queue of 3", 750 * time.Millisecond, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, -1}},
		{"max_delay room for one more after the queue", time.Second, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second}},
		{"max_delay shorter than the queue", 400 * time.Millisecond, []time.Duration{0, 250 * time.Millisecond, -1, -1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(4).WithBurst(3), rules.Delay, tc.maxDelay)
				e, _ := newEngine(t, "", nil, shaped)
				start := time.Now()
				got := make([]time.Duration, len(tc.want))
				var wg sync.WaitGroup
				for i := range tc.want {
					wg.Go(func() {
						res := e.Admit(context.Background(), []rules.Match{{Rule: shaped, Key: "k"}}, 1)
						got[i] = time.Since(start)
						if !res.Allowed {
							got[i] = -1
							if res.DeniedBy != shaped {
								t.Errorf("request %d: denied by %v, want shaped", i, res.DeniedBy)
							}
						}
					})
					synctest.Wait() // arrive in order, at the same instant
				}
				wg.Wait()
				for i := range tc.want {
					if got[i] != tc.want[i] {
						t.Errorf("request %d: passed at %v, want %v (-1: denied)", i, got[i], tc.want[i])
					}
				}
			})
		})
	}
}

// With another algorithm, the delay action waits RetryAfter and asks again.
func TestAdmitWaitsForSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		waiting := rule("waiting", sluice.TokenBucket, sluice.PerSecond(2).WithBurst(1), rules.Delay, time.Second)
		e, reg := newEngine(t, "", nil, waiting)
		ms := []rules.Match{{Rule: waiting, Key: "k"}}
		start := time.Now()
		for i, want := range []time.Duration{0, 500 * time.Millisecond, time.Second} {
			res := e.Admit(context.Background(), ms, 1)
			if !res.Allowed || time.Since(start) != want {
				t.Errorf("Admit %d: allowed %v at %v, want allowed at %v", i, res.Allowed, time.Since(start), want)
			}
		}
		// Three more at once would need 1.5s of waiting for the last: over max_delay.
		short := rule("short", sluice.TokenBucket, sluice.PerSecond(2).WithBurst(1), rules.Delay, 300*time.Millisecond)
		e2, _ := newEngine(t, "", nil, short)
		ms2 := []rules.Match{{Rule: short, Key: "k"}}
		e2.Admit(context.Background(), ms2, 1)
		t1 := time.Now()
		res := e2.Admit(context.Background(), ms2, 1)
		if res.Allowed || time.Since(t1) != 0 || res.DeniedBy != short || res.Decision.RetryAfter != 500*time.Millisecond {
			t.Errorf("Admit over max_delay: allowed %v after %v, retry %v; want denied at once with retry 500ms", res.Allowed, time.Since(t1), res.Decision.RetryAfter)
		}
		if got := metricstest.Gather(t, reg)[`sluice_decisions_total{result="allowed",rule="waiting"}`]; got != 3 {
			t.Errorf("allowed decisions of waiting = %v, want 3 (one per request, not per attempt)", got)
		}
	})
}

func TestAdmitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rule("slow", sluice.FixedWindow, sluice.PerMinute(1), rules.Delay, 2*time.Minute)
		e, _ := newEngine(t, "", nil, r)
		ms := []rules.Match{{Rule: r, Key: "k"}}
		e.Admit(context.Background(), ms, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		res := e.Admit(ctx, ms, 1)
		if res.Allowed || !errors.Is(res.Err, context.DeadlineExceeded) || time.Since(start) != 5*time.Second {
			t.Errorf("Admit with a 5s context: allowed %v err %v after %v; want denied with DeadlineExceeded after 5s", res.Allowed, res.Err, time.Since(start))
		}
	})
}

// A delay rule and a reject rule: a denial by the reject rule is final.
func TestAdmitRejectRuleDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := rule("d", sluice.TokenBucket, sluice.PerSecond(10), rules.Delay, time.Minute)
		r := rule("r", sluice.FixedWindow, sluice.PerMinute(1), rules.Reject, 0)
		e, _ := newEngine(t, "", nil, d, r)
		ms := []rules.Match{{Rule: d, Key: "d"}, {Rule: r, Key: "r"}}
		e.Admit(context.Background(), ms, 1)
		start := time.Now()
		res := e.Admit(context.Background(), ms, 1)
		if res.Allowed || res.DeniedBy != r || time.Since(start) != 0 {
			t.Errorf("Admit: allowed %v denied by %v after %v; want denied by r at once", res.Allowed, res.DeniedBy, time.Since(start))
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	r := rule("bench", sluice.GCRA, sluice.PerSecond(1<<40), rules.Reject, 0)
	e, _ := newEngine(b, "", nil, r)
	ms := []rules.Match{{Rule: r, Key: "bench|k"}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.Decide(context.Background(), ms, 1)
		}
	})
}

// On a clock that does not move, the waits themselves still count against
// max_delay, so Admit ends.
func TestAdmitStoppedClockEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rule("stuck", sluice.FixedWindow, sluice.PerMinute(1), rules.Delay, 2*time.Minute)
		e, _ := newEngine(t, "", func() time.Time { return t0 }, r)
		ms := []rules.Match{{Rule: r, Key: "k"}}
		e.Admit(context.Background(), ms, 1)
		res := e.Admit(context.Background(), ms, 1)
		if res.Allowed || res.Waited != 2*time.Minute || res.DeniedBy != r {
			t.Errorf("Admit on a stopped clock: allowed %v waited %v denied by %v; want denied by stuck after waiting max_delay (2m)", res.Allowed, res.Waited, res.DeniedBy)
		}
	})
}
