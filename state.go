package sluice

import (
	"fmt"
	"time"
)

// State is the per-key state of one algorithm, for store authors (see
// "For store authors" in the package documentation). The zero State is the
// resting state: a key never seen. What the fields mean depends on the
// algorithm (all times are in ticks, see Limit):
//
//	token_bucket            T last refill, N debt: (Burst − tokens) × Period, in token-ticks
//	gcra                    T theoretical arrival time, N its fraction in 1/Rate ticks,
//	                        M the latest time a request added debt (for the Redis store's refunds)
//	leaky_bucket            T leave time of the last admitted request, N its fraction,
//	                        M the latest time a request queued (at least 1: non-zero once set)
//	fixed_window            T window number, N count
//	sliding_window_log      Log admission times, oldest first (one per unit of cost)
//	sliding_window_counter  T newest sub-window; N, M its count and the previous one's when
//	                        Segments is 1; otherwise Log holds Segments+1 counts in a ring
//
// Stores keep a State per key and hand it to Take; the Redis store keeps the
// same fields in one Redis key ("T N M" as a string, or a hash for the log
// and the multi-segment counter) and runs the Lua twin of Take.
type State struct {
	T, N, M int64
	Log     []int64
}

// Clone returns a copy of s that shares no memory with it.
func (s State) Clone() State {
	if s.Log != nil {
		s.Log = append([]int64(nil), s.Log...)
	}
	return s
}

// MaxLogRate bounds the Rate of a SlidingWindowLog: its state keeps one
// time per unit admitted in the last Period, so up to Rate × 8 bytes a key
// in memory (8 MB at the bound), and a request of cost n appends n times.
// Use SlidingWindowCounter for larger rates.
const MaxLogRate = 1_000_000

func logRateError(rate int64) error {
	return fmt.Errorf("%w: rate %d is too large for sliding_window_log (at most %d: it keeps one time per request counted, 8 bytes each; use sliding_window_counter)", ErrInvalidLimit, rate, MaxLogRate)
}

// windowBurstError refuses l's burst under a window, which admits its rate
// each period whatever the burst: a burst other than the rate would be
// accepted and never applied.
func windowBurstError(a Algorithm, l *Limit) error {
	return fmt.Errorf("%w: burst %d applies to token_bucket, gcra and leaky_bucket only: %s admits the rate, %d, each period (leave the burst out, or pick one of those)", ErrInvalidLimit, l.Burst, a, l.Rate)
}

// TakesBurst reports whether a takes a Limit's Burst: TokenBucket and
// GCRA (the bucket's size) and LeakyBucket (the queue's). The windows
// (FixedWindow, SlidingWindowLog, SlidingWindowCounter) admit their Rate
// each period, and refuse a Burst other than 0 or the Rate.
func (a Algorithm) TakesBurst() bool {
	return a == TokenBucket || a == GCRA || a == LeakyBucket
}

// isWindow reports whether a is one of the windows, which take no burst.
func (a Algorithm) isWindow() bool { return a >= FixedWindow && a <= SlidingWindowCounter }

// ValidateLimit reports whether a can enforce l: Validate; for the
// SlidingWindowLog a Rate of at most MaxLogRate; and for the windows
// (FixedWindow, SlidingWindowLog, SlidingWindowCounter), which admit the
// Rate each period, no Burst other than 0 or the Rate (only TokenBucket,
// GCRA and LeakyBucket take a burst). NewLimiter, SetLimit, and every Take
// check it.
func (a Algorithm) ValidateLimit(l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if a == SlidingWindowLog && l.Rate > MaxLogRate {
		return logRateError(l.Rate)
	}
	if a.isWindow() && l.Burst != 0 && l.Burst != l.Rate {
		return windowBurstError(a, &l)
	}
	return nil
}

// Capacity is the largest cost l ever admits under a at once (past it a
// request is refused with RetryAfter Never): the rate for the windows, the
// burst for the token bucket and GCRA, the queue (burst + 1) for the leaky
// bucket. It is also the Remaining of a key at rest, so Capacity less a
// Decision's Remaining is what the key has used.
func (a Algorithm) Capacity(l Limit) int64 {
	switch a {
	case TokenBucket, GCRA:
		return l.BurstOrRate()
	case LeakyBucket:
		return l.BurstOrRate() + 1
	}
	return l.Rate
}

// UsesLog, for store authors, reports whether a keeps its state in State.Log under l, which
// tells a store it may want to keep such keys apart.
func (a Algorithm) UsesLog(l Limit) bool {
	return a == SlidingWindowLog || (a == SlidingWindowCounter && l.Segments > 1)
}

// Take, for store authors, runs one step of algorithm a for a request of the given cost at now,
// updating *st in place. It returns the decision and the instant from which
// *st is at rest: from then on a store may forget the key, because a zero
// State decides exactly the same. A cost of 0 asks without counting. A
// now outside MinTime … MaxTime is an error wrapping ErrInvalidTime.
//
// Take is pure: no clock, no I/O. It is not safe for concurrent use on the
// same State; stores serialize calls per key.
func (a Algorithm) Take(st *State, l Limit, now time.Time, cost int64) (Decision, time.Time, error) {
	var d Decision
	if err := CheckTime(now); err != nil {
		return d, time.Time{}, err
	}
	idle, err := a.TakeMicro(&d, st, &l, now.UnixMicro(), cost)
	return d, time.UnixMicro(idle), err
}

// TakeMicro, for store authors, is Take on a store's hot path: times are microseconds
// since the Unix epoch, the decision is written to *d, and the instant of
// rest is returned. Everything goes by pointer, because copying these
// structs by value costs more than the arithmetic.
func (a Algorithm) TakeMicro(d *Decision, st *State, l *Limit, nowMicro, cost int64) (idle int64, err error) {
	return a.step(d, st, l, nowMicro, cost, false)
}

// Charge, for store authors, is Take for a Request with Force: it counts
// cost even past the limit. The overage is carried as debt, so that later
// requests are refused until it has drained:
//
//	token_bucket, gcra      the tokens go below zero (the debt grows past Burst × Period;
//	                        the theoretical arrival time moves further); it drains at Rate
//	leaky_bucket            the queue grows past Burst: the last leave time moves further
//	fixed_window            the window's count goes over Rate, until the window ends
//	sliding_window_log      the log holds the charge's entries (at most Rate+1 of them, which
//	                        decides exactly as more would), until they leave the window
//	sliding_window_counter  the sub-window's count goes over Rate, weighed out as the window slides
//
// The debt is bounded so that the integers stay exact (below 2^53, as the
// Redis store's Lua needs): a bucket's debt at most max(2^50, (Burst+1) ×
// Period) token-ticks, a window's count at most max(2^50, Rate+1), a
// counter's sub-window max(Rate+1, 2^49 / Period ticks); a larger charge
// counts as that much.
//
// The Decision's Allowed reports whether the charge fitted under the limit
// (what Take would have answered); the charge is counted either way. When
// it did not fit, RetryAfter is how long until a request of cost 1 is
// admitted again (never Never); Remaining and ResetAfter are after the charge.
func (a Algorithm) Charge(st *State, l Limit, now time.Time, cost int64) (Decision, time.Time, error) {
	var d Decision
	if err := CheckTime(now); err != nil {
		return d, time.Time{}, err
	}
	idle, err := a.ChargeMicro(&d, st, &l, now.UnixMicro(), cost)
	return d, time.UnixMicro(idle), err
}

// ChargeMicro is Charge as TakeMicro is Take.
func (a Algorithm) ChargeMicro(d *Decision, st *State, l *Limit, nowMicro, cost int64) (idle int64, err error) {
	return a.step(d, st, l, nowMicro, cost, true)
}

func (a Algorithm) step(d *Decision, st *State, l *Limit, nowMicro, cost int64, force bool) (idle int64, err error) {
	var p params
	if err := l.paramsTo(&p); err != nil {
		return 0, err
	}
	if a == SlidingWindowLog && p.rate > MaxLogRate {
		return 0, logRateError(l.Rate)
	}
	if p.burst != p.rate && a.isWindow() {
		return 0, windowBurstError(a, l)
	}
	if cost < 0 {
		return 0, fmt.Errorf("%w: %d is negative", ErrInvalidCost, cost)
	}
	if uint64(nowMicro) > maxNow {
		return 0, timeError(time.UnixMicro(nowMicro).UTC())
	}
	now := p.ticks(nowMicro)
	var o outcome
	switch a {
	case TokenBucket:
		tokenBucket(st, &p, now, cost, force, &o)
	case GCRA:
		gcra(st, &p, now, cost, force, &o)
	case LeakyBucket:
		leakyBucket(st, &p, now, cost, force, &o)
	case FixedWindow:
		fixedWindow(st, &p, now, cost, force, &o)
	case SlidingWindowLog:
		slidingLog(st, &p, now, cost, force, &o)
	case SlidingWindowCounter:
		slidingCounter(st, &p, now, cost, force, &o)
	default:
		return 0, fmt.Errorf("%w: %d", ErrUnknownAlgorithm, uint8(a))
	}
	d.Allowed = o.allowed
	d.Limit = p.rate
	d.Remaining = o.remaining
	d.RetryAfter = 0
	if !o.allowed {
		d.RetryAfter = p.dur(o.retry)
	}
	d.ResetAfter = p.dur(o.reset)
	d.Delay = p.dur(o.delay)
	return o.idle * p.tick, nil
}

// outcome is a decision in ticks, as the algorithms compute it.
type outcome struct {
	allowed   bool
	remaining int64
	retry     int64 // ticks; −1 never
	reset     int64
	delay     int64
	idle      int64 // instant (ticks) from which the state is at rest
}
