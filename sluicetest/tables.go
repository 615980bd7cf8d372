package sluicetest

import (
	"time"

	"github.com/sluicehq/sluice"
)

// allowed and denied build Wants that check only some fields.
func allowed(remaining int64) Want {
	return Want{Allowed: true, Remaining: remaining, RetryAfter: 0, ResetAfter: NotChecked, Delay: NotChecked}
}

func denied(remaining int64, retry time.Duration) Want {
	return Want{Allowed: false, Remaining: remaining, RetryAfter: retry, ResetAfter: NotChecked, Delay: NotChecked}
}

// repeat returns n steps at the same instant, each admitted, with remaining
// counting down from first.
func repeat(at time.Duration, key string, n int, first int64) []Step {
	steps := make([]Step, n)
	for i := range steps {
		steps[i] = Step{At: at, Key: key, Want: allowed(first - int64(i))}
	}
	return steps
}

func concat(parts ...[]Step) []Step {
	var out []Step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

const (
	ms = time.Millisecond
	s  = time.Second
)

// Tables returns the step tables: the classic scenarios, at least one
// per algorithm. (the worked example itself — 9 requests in the
// previous minute and 5 in this one, probed at 25% — is a state no monotone
// trace reaches, since the 5th request of this minute is admitted only after
// a third of it; the root package tests it on a State built by hand. The
// table below reaches the same formula with reachable counts.)
func Tables() []Table {
	perMin10 := sluice.PerMinute(10)
	bucket := func(alg sluice.Algorithm) Table {
		return Table{
			Name: alg.String() + "/burst_then_steady", Algorithm: alg, Limit: sluice.PerSecond(1).WithBurst(3),
			Steps: concat(
				[]Step{{At: 0, Want: Want{Allowed: true, Remaining: 2, ResetAfter: 1 * s, Delay: 0}}},
				repeat(0, "", 2, 1),
				[]Step{
					{At: 0, Want: Want{Allowed: false, Remaining: 0, RetryAfter: 1 * s, ResetAfter: 3 * s, Delay: 0}},
					{At: 1 * s, Want: allowed(0)},
					{At: 1500 * ms, Want: denied(0, 500*ms)},
					{At: 2 * s, Want: allowed(0)},
					{At: 10 * s, Want: Want{Allowed: true, Remaining: 2, ResetAfter: 1 * s, Delay: 0}},
					{At: 10 * s, Cost: 2, Want: Want{Allowed: true, Remaining: 0, ResetAfter: 3 * s}},
					{At: 10 * s, Cost: 4, Want: denied(0, sluice.Never)},
					{At: 11 * s, Query: true, Want: Want{Allowed: true, Remaining: 1, RetryAfter: 0, ResetAfter: 2 * s}},
				},
			),
		}
	}
	steady := func(alg sluice.Algorithm) Table {
		return Table{
			Name: alg.String() + "/steady_rate_3_per_s", Algorithm: alg, Limit: sluice.PerSecond(3),
			Steps: concat(
				repeat(0, "", 3, 2),
				[]Step{
					// 1/3 s is 333333.33 µs: the bucket holds a token again only
					// at 333334 µs, to the microsecond.
					{At: 333333 * time.Microsecond, Want: denied(0, time.Microsecond)},
					{At: 333334 * time.Microsecond, Want: allowed(0)},
					{At: 666667 * time.Microsecond, Want: allowed(0)},
					{At: 1 * s, Want: allowed(0)},
					{At: 1 * s, Want: denied(0, 333334*time.Microsecond)},
				},
			),
		}
	}
	return []Table{
		{
			// 9 requests in the previous minute; 5 in this one at 40% (the
			// estimate floor(9 × 0.6) = 5 leaves room for exactly 5); at 41%
			// floor(9 × 0.59) + 5 + 1 = 11 > 10 is refused until the overlap
			// falls below 5/9 of a minute; at 50% floor(4.5) + 5 + 1 = 10 is
			// admitted, as in the worked example.
			Name: "sliding_window_counter/previous_and_current_minute", Algorithm: sluice.SlidingWindowCounter, Limit: perMin10,
			Steps: concat(
				repeat(10*s, "", 9, 9),
				repeat(84*s, "", 5, 4),
				[]Step{
					{At: 84600 * ms, Want: denied(0, 2066667*time.Microsecond)},
					{At: 90 * s, Want: allowed(0)},
					// Full again 1 µs after the next minute starts: at its first
					// instant the oldest sub-window still overlaps entirely.
					{At: 180 * s, Want: Want{Allowed: true, Remaining: 9, ResetAfter: 60*s + time.Microsecond}},
				},
			),
		},
		{
			Name: "sliding_window_counter/segments_4", Algorithm: sluice.SlidingWindowCounter, Limit: perMin10.WithSegments(4),
			Steps: concat(
				repeat(0, "", 10, 9), // sub-window 0 of [0,15s)
				[]Step{
					// at 60 s sub-window 0 is the oldest, fully overlapping.
					{At: 60 * s, Want: denied(0, 1*time.Microsecond)},
					{At: 60*s + 1*time.Microsecond, Want: allowed(0)},
					{At: 66 * s, Want: allowed(2)}, // floor(10 × 9/15) + 1 + 1 = 8
				},
			),
		},
		{
			// The fixed window's 2× burst across a boundary.
			Name: "fixed_window/boundary_burst", Algorithm: sluice.FixedWindow, Limit: perMin10,
			Steps: concat(
				repeat(59*s, "", 10, 9),
				[]Step{{At: 59500 * ms, Want: denied(0, 500*ms)}},
				repeat(60*s, "", 10, 9), // 20 admitted within one second
				[]Step{
					{At: 60 * s, Want: Want{Allowed: false, Remaining: 0, RetryAfter: 60 * s, ResetAfter: 60 * s}},
					{At: 60 * s, Cost: 11, Want: denied(0, sluice.Never)},
				},
			),
		},
		{
			// The same traffic, which the sliding log refuses.
			Name: "sliding_window_log/no_boundary_burst", Algorithm: sluice.SlidingWindowLog, Limit: perMin10,
			Steps: concat(
				repeat(59*s, "", 10, 9),
				[]Step{
					{At: 60 * s, Want: Want{Allowed: false, Remaining: 0, RetryAfter: 59 * s, ResetAfter: 59 * s}},
					{At: 119 * s, Want: Want{Allowed: true, Remaining: 9, ResetAfter: 60 * s}},
					{At: 119 * s, Cost: 9, Want: allowed(0)},
					{At: 178 * s, Want: denied(0, 1*s)},
					{At: 178 * s, Cost: 11, Want: denied(0, sluice.Never)},
				},
			),
		},
		bucket(sluice.TokenBucket),
		bucket(sluice.GCRA),
		steady(sluice.TokenBucket),
		steady(sluice.GCRA),
		{
			// The shaper: arrivals at one instant leave 500 ms apart.
			Name: "leaky_bucket/even_spacing", Algorithm: sluice.LeakyBucket, Limit: sluice.PerSecond(2),
			Steps: []Step{
				{At: 0, Want: Want{Allowed: true, Remaining: 2, Delay: 0, ResetAfter: 500 * ms}},
				{At: 0, Want: Want{Allowed: true, Remaining: 1, Delay: 500 * ms, ResetAfter: 1 * s}},
				{At: 0, Want: Want{Allowed: true, Remaining: 0, Delay: 1 * s, ResetAfter: 1500 * ms}},
				{At: 0, Want: Want{Allowed: false, Remaining: 0, RetryAfter: 500 * ms, Delay: 0, ResetAfter: 1500 * ms}},
				{At: 200 * ms, Want: denied(0, 300*ms)},
				{At: 500 * ms, Want: Want{Allowed: true, Remaining: 0, Delay: 1 * s, ResetAfter: NotChecked}},
				{At: 10 * s, Want: Want{Allowed: true, Remaining: 2, Delay: 0, ResetAfter: 500 * ms}},
				{At: 10 * s, Query: true, Want: Want{Allowed: true, Remaining: 2, Delay: 0, ResetAfter: 500 * ms}},
				{At: 10 * s, Cost: 4, Want: denied(2, sluice.Never)},
			},
		},
		{
			Name: "leaky_bucket/spaced_arrivals_pass_undelayed", Algorithm: sluice.LeakyBucket, Limit: sluice.PerSecond(10).WithBurst(5),
			Steps: []Step{
				{At: 0, Want: Want{Allowed: true, Remaining: 5, Delay: 0, ResetAfter: NotChecked}},
				{At: 100 * ms, Want: Want{Allowed: true, Remaining: 5, Delay: 0, ResetAfter: NotChecked}},
				{At: 150 * ms, Want: Want{Allowed: true, Remaining: 4, Delay: 50 * ms, ResetAfter: NotChecked}},
				{At: 150 * ms, Want: Want{Allowed: true, Remaining: 3, Delay: 150 * ms, ResetAfter: NotChecked}},
			},
		},
		{
			// A request of cost n leaves with its last unit: at max(now,
			// previous leave + n spacings) behind a busy queue, and n-1
			// spacings after now on an idle one (as n requests of cost 1
			// at one instant, the last of which waits n-1 spacings). It is
			// admitted iff that delay is at most burst spacings.
			Name: "leaky_bucket/cost_waits_for_its_last_unit", Algorithm: sluice.LeakyBucket, Limit: sluice.PerSecond(2),
			Steps: []Step{
				{At: 0, Want: Want{Allowed: true, Remaining: 2, Delay: 0, ResetAfter: 500 * ms}},
				{At: 0, Cost: 2, Want: Want{Allowed: true, Remaining: 0, Delay: 1 * s, ResetAfter: 1500 * ms}},
				{At: 0, Want: Want{Allowed: false, Remaining: 0, RetryAfter: 500 * ms, Delay: 0, ResetAfter: 1500 * ms}},
				{At: 1 * s, Cost: 2, Want: Want{Allowed: true, Remaining: 0, Delay: 1 * s, ResetAfter: 1500 * ms}},
				{At: 10 * s, Cost: 3, Want: Want{Allowed: true, Remaining: 0, Delay: 1 * s, ResetAfter: 1500 * ms}},
				{At: 10 * s, Query: true, Want: Want{Allowed: true, Remaining: 0, Delay: 1 * s, ResetAfter: 1500 * ms}},
			},
		},
	}
}
