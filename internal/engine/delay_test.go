package engine_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/rules"
)

// TestDelayQueueLongerThanMaxDelay: a delay rule of 5/m (a leaky bucket
// whose queue of 5 lasts 60s) with the default max_delay of 1s. A request
// whose slot would leave later than max_delay is refused, and must take
// nothing: neither a queue slot, which would push every later request's
// slot further out (a client that keeps to the rate after a burst would
// then be refused for ever), nor anything of the request's other rules.
func TestDelayQueueLongerThanMaxDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerMinute(5).WithBurst(5), rules.Delay, rules.DefaultMaxDelay)
		hourly := rule("hourly", sluice.FixedWindow, sluice.PerHour(100), rules.Reject, 0)
		e, reg := newEngine(t, "", nil, shaped, hourly)
		ms := []rules.Match{{Rule: shaped, Key: "s"}, {Rule: hourly, Key: "h"}}
		// A burst of 3: the first passes at once, the others would wait
		// 12s and 24s, past max_delay.
		for i, want := range []bool{true, false, false} {
			res := e.Admit(context.Background(), ms, 1)
			if res.Allowed != want || res.Waited != 0 {
				t.Errorf("burst request %d: allowed %v after %v, want %v at once", i, res.Allowed, res.Waited, want)
			}
			if !want && (res.DeniedBy != shaped || res.Decision.RetryAfter != 11*time.Second) {
				t.Errorf("burst request %d: denied by %s, retry after %v; want shaped, 11s (12s to its slot, less the 1s it may wait)", i, nameOf(res.DeniedBy), res.Decision.RetryAfter)
			}
		}
		// Then one request per 12s, the rate: each has its slot at once.
		for i := range 6 {
			time.Sleep(12 * time.Second)
			if res := e.Admit(context.Background(), ms, 1); !res.Allowed || res.Waited != 0 {
				t.Errorf("request %d at the rate, 12s after the last: allowed %v after %v, want allowed at once", i, res.Allowed, res.Waited)
			}
		}
		// 7 admitted: the hourly rule counted 7, not the refused ones too.
		if res := e.Decide(context.Background(), ms[1:], 0); res.Decision.Remaining != 93 {
			t.Errorf("hourly rule after 7 admitted requests and 2 refused: %d remaining, want 93", res.Decision.Remaining)
		}
		got := metricstest.Gather(t, reg)
		if got[`sluice_decisions_total{result="allowed",rule="shaped"}`] != 7 || got[`sluice_decisions_total{result="denied",rule="shaped"}`] != 2 {
			t.Errorf("shaped decisions: %v allowed, %v denied; want 7, 2", got[`sluice_decisions_total{result="allowed",rule="shaped"}`], got[`sluice_decisions_total{result="denied",rule="shaped"}`])
		}
	})
}

func nameOf(r *rules.Rule) string {
	if r == nil {
		return "no rule"
	}
	return r.Name
}

// TestDelayQueueIdleCostTwo: on an idle queue a request of cost 2 leaves
// with its second unit, one spacing (12s) after now, as the second of two
// requests of cost 1 would. Under max_delay 1s the question before the take
// refuses it, taking nothing (a request of cost 1 then leaves at once);
// under max_delay 13s it is admitted after 12s.
func TestDelayQueueIdleCostTwo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerMinute(5).WithBurst(5), rules.Delay, rules.DefaultMaxDelay)
		e, _ := newEngine(t, "", nil, shaped)
		ms := []rules.Match{{Rule: shaped, Key: "s"}}
		if res := e.Admit(context.Background(), ms, 2); res.Allowed || res.Waited != 0 || res.Decision.RetryAfter != 11*time.Second {
			t.Errorf("cost 2 on an idle queue, max_delay 1s: allowed %v after %v, retry after %v; want refused at once, retry after 11s", res.Allowed, res.Waited, res.Decision.RetryAfter)
		}
		if res := e.Admit(context.Background(), ms, 1); !res.Allowed || res.Waited != 0 {
			t.Errorf("cost 1 after the refused cost 2: allowed %v after %v, want allowed at once (the refusal took nothing)", res.Allowed, res.Waited)
		}
		roomy := rule("roomy", sluice.LeakyBucket, sluice.PerMinute(5).WithBurst(5), rules.Delay, 13*time.Second)
		e, _ = newEngine(t, "", nil, roomy)
		ms = []rules.Match{{Rule: roomy, Key: "s"}}
		if res := e.Admit(context.Background(), ms, 2); !res.Allowed || res.Waited != 12*time.Second {
			t.Errorf("cost 2 on an idle queue, max_delay 13s: allowed %v after %v, want allowed after 12s", res.Allowed, res.Waited)
		}
	})
}

// TestDelayQueueBusyCostTwo: a request of cost 2 behind a busy queue leaves
// with its last unit, two spacings after the queue's last (24s). Under
// max_delay 13s the question before the take refuses it, taking nothing;
// under 25s it is admitted after 24s, and its units hold the queue until
// then.
func TestDelayQueueBusyCostTwo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerMinute(5).WithBurst(5), rules.Delay, 13*time.Second)
		e, _ := newEngine(t, "", nil, shaped)
		ms := []rules.Match{{Rule: shaped, Key: "s"}}
		if res := e.Admit(context.Background(), ms, 1); !res.Allowed || res.Waited != 0 {
			t.Fatalf("first request: allowed %v after %v, want allowed at once", res.Allowed, res.Waited)
		}
		if res := e.Admit(context.Background(), ms, 2); res.Allowed || res.Waited != 0 || res.Decision.RetryAfter != 11*time.Second {
			t.Errorf("cost 2 behind one request, max_delay 13s: allowed %v after %v, retry after %v; want refused at once, retry after 11s", res.Allowed, res.Waited, res.Decision.RetryAfter)
		}
		if res := e.Admit(context.Background(), ms, 1); !res.Allowed || res.Waited != 12*time.Second {
			t.Errorf("cost 1 after the refused cost 2: allowed %v after %v, want allowed after 12s (the refusal took nothing)", res.Allowed, res.Waited)
		}

		roomy := rule("roomy", sluice.LeakyBucket, sluice.PerMinute(5).WithBurst(5), rules.Delay, 25*time.Second)
		e, _ = newEngine(t, "", nil, roomy)
		ms = []rules.Match{{Rule: roomy, Key: "s"}}
		if res := e.Admit(context.Background(), ms, 1); !res.Allowed || res.Waited != 0 {
			t.Fatalf("first request: allowed %v after %v, want allowed at once", res.Allowed, res.Waited)
		}
		if res := e.Admit(context.Background(), ms, 2); !res.Allowed || res.Waited != 24*time.Second {
			t.Errorf("cost 2 behind one request, max_delay 25s: allowed %v after %v (denied by %s, retry after %v), want allowed after 24s", res.Allowed, res.Waited, nameOf(res.DeniedBy), res.Decision.RetryAfter)
		}
		// Its two units hold the queue until 24s, now: a request leaves at 36s.
		if res := e.Decide(context.Background(), ms, 1); !res.Allowed || res.Decision.Delay != 12*time.Second {
			t.Errorf("after the cost 2 request, at 24s: allowed %v with delay %v, want allowed with delay 12s", res.Allowed, res.Decision.Delay)
		}
	})
}

// TestAdmitLeftWhileWaiting: what a client that leaves during a wait
// leaves behind. Under a leaky bucket the request was admitted before it
// waited its Delay: its place in the queue, which has not left, is given
// back (the store has Refunder), so the next request takes it; its other
// rules' counts stay taken. It used to keep the place, and the next
// request queued behind a place nobody would leave in. Waiting for a
// slot under another algorithm, it had taken nothing.
func TestAdmitLeftWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(3), rules.Delay, 5*time.Second)
		hourly := rule("hourly", sluice.FixedWindow, sluice.PerHour(100), rules.Reject, 0)
		e, reg := newEngine(t, "", nil, shaped, hourly)
		ms := []rules.Match{{Rule: shaped, Key: "s"}, {Rule: hourly, Key: "h"}}
		if res := e.Admit(context.Background(), ms, 1); !res.Allowed || res.Waited != 0 {
			t.Fatalf("first request: allowed %v after %v, want allowed at once", res.Allowed, res.Waited)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		res := e.Admit(ctx, ms, 1)
		cancel()
		if res.Allowed || !errors.Is(res.Err, context.DeadlineExceeded) || res.Waited != 500*time.Millisecond {
			t.Fatalf("second request, gone after 500ms of its 1s delay: allowed %v err %v after %v; want ended after 500ms", res.Allowed, res.Err, res.Waited)
		}
		// At 500ms the gone request's place (leaving at 1s) is free
		// again: a new request takes it.
		if res := e.Decide(context.Background(), ms, 1); !res.Allowed || res.Decision.Delay != 500*time.Millisecond {
			t.Errorf("third request at 500ms: allowed %v with delay %v, want delay 500ms (the gone request's place, at 1s)", res.Allowed, res.Decision.Delay)
		}
		if res := e.Decide(context.Background(), ms[1:], 0); res.Decision.Remaining != 97 {
			t.Errorf("hourly rule after 3 admitted requests, one gone: %d remaining, want 97", res.Decision.Remaining)
		}
		if got := metricstest.Gather(t, reg)[`sluice_delay_given_back_total{rule="shaped"}`]; got != 1 {
			t.Errorf(`sluice_delay_given_back_total{rule="shaped"} = %v, want 1 (the gone request's place)`, got)
		}

		slow := rule("slow", sluice.FixedWindow, sluice.PerMinute(1), rules.Delay, 2*time.Minute)
		daily := rule("daily", sluice.FixedWindow, sluice.PerDay(100), rules.Reject, 0)
		e2, _ := newEngine(t, "", nil, slow, daily)
		ms2 := []rules.Match{{Rule: slow, Key: "k"}, {Rule: daily, Key: "d"}}
		e2.Admit(context.Background(), ms2, 1)
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		res = e2.Admit(ctx, ms2, 1)
		cancel()
		if res.Allowed || !errors.Is(res.Err, context.DeadlineExceeded) {
			t.Fatalf("request waiting for a slot, gone: allowed %v err %v; want ended", res.Allowed, res.Err)
		}
		if res := e2.Decide(context.Background(), ms2[1:], 0); res.Decision.Remaining != 99 {
			t.Errorf("daily rule after 1 admitted request and 1 gone while waiting for a slot: %d remaining, want 99", res.Decision.Remaining)
		}
	})
}

// TestDelayFullQueueCostTwo: a request of cost 2 refused by a full queue
// (its last unit leaving at 3s + 2s) waits for the queue to have room for
// its two places, then leaves with its last: 2s + 3s here, within a
// max_delay of 5s; under 4s it is refused.
func TestDelayFullQueueCostTwo(t *testing.T) {
	for _, c := range []struct {
		maxDelay time.Duration
		allowed  bool
	}{{5 * time.Second, true}, {4 * time.Second, false}} {
		synctest.Test(t, func(t *testing.T) {
			shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(3), rules.Delay, c.maxDelay)
			e, _ := newEngine(t, "", nil, shaped)
			ms := []rules.Match{{Rule: shaped, Key: "s"}}
			for i := range 4 {
				if res := e.Decide(context.Background(), ms, 1); !res.Allowed {
					t.Fatalf("request %d filling the queue: denied", i)
				}
			}
			res := e.Admit(context.Background(), ms, 2)
			if c.allowed && (!res.Allowed || res.Waited != 5*time.Second) {
				t.Errorf("cost 2 behind a full queue, max_delay %v: allowed %v after %v (denied by %s, retry after %v), want allowed after 5s", c.maxDelay, res.Allowed, res.Waited, nameOf(res.DeniedBy), res.Decision.RetryAfter)
			}
			if !c.allowed && res.Allowed {
				t.Errorf("cost 2 behind a full queue, max_delay %v: allowed after %v, want refused (it would leave after 5s)", c.maxDelay, res.Waited)
			}
		})
	}
}

// TestShadowCheckNeverShapes: /v1/check on a shadow leaky bucket counts
// the request but must not ask the caller to wait (delay_ms): a shadow
// rule never changes traffic, neither refusing nor shaping it.
func TestShadowCheckNeverShapes(t *testing.T) {
	shadow := rule("would-shape", sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(3), rules.Shadow, 0)
	e, _ := newEngine(t, "", func() time.Time { return t0 }, shadow)
	for i := range 3 {
		res := e.Check(context.Background(), shadow, "k", 1)
		if !res.Allowed || res.Decision.Delay != 0 {
			t.Errorf("Check %d on a shadow leaky bucket: allowed %v with delay %v, want allowed with no delay", i, res.Allowed, res.Decision.Delay)
		}
		rep := e.Report(context.Background(), shadow, "r", 1)
		if !rep.Allowed || rep.Decision.Delay != 0 {
			t.Errorf("Report %d on a shadow leaky bucket: allowed %v with delay %v, want allowed with no delay", i, rep.Allowed, rep.Decision.Delay)
		}
	}
	// Counted all the same: a fourth place is the last the queue holds.
	if res := e.Check(context.Background(), shadow, "k", 0); res.Decision.Remaining != 1 {
		t.Errorf("shadow leaky bucket after 3 checks: remaining %d, want 1", res.Decision.Remaining)
	}
}

// TestDelayFullQueueCostTwoRefusedAtOnce: a request of cost 2 refused by
// a full queue could leave only with its last unit, burst spacings after
// the queue has room for it (2s + 3s here): under a max_delay of 4s it is
// refused at once, not after waiting 2s for room it cannot use.
func TestDelayFullQueueCostTwoRefusedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := rule("shaped", sluice.LeakyBucket, sluice.PerSecond(1).WithBurst(3), rules.Delay, 4*time.Second)
		e, _ := newEngine(t, "", nil, shaped)
		ms := []rules.Match{{Rule: shaped, Key: "s"}}
		for i := range 4 {
			if res := e.Decide(context.Background(), ms, 1); !res.Allowed {
				t.Fatalf("request %d filling the queue: denied", i)
			}
		}
		if res := e.Admit(context.Background(), ms, 2); res.Allowed || res.Waited != 0 {
			t.Errorf("cost 2 behind a full queue, max_delay 4s: allowed %v after %v (retry after %v); want refused at once (it would leave after 5s)", res.Allowed, res.Waited, res.Decision.RetryAfter)
		}
	})
}
