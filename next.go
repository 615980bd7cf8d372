package sluice

import "time"

// NextAfter is how long after d, a decision of a under l as Take or
// Charge returns it, until the key's Remaining grows by at least one if
// nothing else arrives: when the next unit is made available. It is the t
// of the RateLimit response field (httplimit.SetHeaders): the effective
// window of the IETF httpapi draft, the time within which the client can
// use no more than Remaining.
//
// It is never shorter than that time, and for four algorithms it is that
// time, or at most one tick (see Limit) more:
//
//	token_bucket, gcra  the next token: ResetAfter less the whole spacings (Period/Rate)
//	                    of the tokens still missing after it
//	leaky_bucket        the next place in the queue, the same way
//	fixed_window        the window's end: ResetAfter
//
// For the sliding windows the decision tells when the last counted units
// leave, not the oldest: NextAfter is then ResetAfter, the time until the
// limit is full again, which is longer (a client following it is slower
// than it need be, never refused). A denied decision's RetryAfter bounds
// it, as the refused request needed at least one more unit: a refusal for
// want of one unit (Remaining 0 and a cost of 1, the common 429) gets the
// exact time from every algorithm. (A query of cost 0 refused while a
// charge's debt is past the limit is bounded so too: it gets its
// RetryAfter, a little before the next unit.)
//
// When the limit is full (ResetAfter 0), no unit comes back until one is
// spent: NextAfter is then the time a unit spent now takes to come back,
// within which the client can use no more than the full Remaining:
// Period/Rate for the buckets and GCRA (rounded up to the tick), Period
// for the sliding window log, and an upper bound for the two windows whose
// decision does not carry where the window stands: Period for the fixed
// window and Period plus a tick for the sliding window counter (for a
// request from a clock behind the key's, whose unit would count in the
// key's newer window, these can be short by up to how far behind it is).
//
// A decision that is not one of a's under l (a decorator's estimate, a
// sharded key's scaled Remaining) may not fit these relations. NextAfter
// returns ResetAfter for one that visibly does not, but cannot see every
// such case: pass an invalid Algorithm (0) for those, which returns
// ResetAfter (bounded by a denial's RetryAfter) always.
func (a Algorithm) NextAfter(d Decision, l Limit) time.Duration {
	var p params
	t := d.ResetAfter
	if l.paramsTo(&p) == nil && a.Valid() {
		t = p.nextAfter(a, &d)
	}
	if !d.Allowed && d.RetryAfter >= 0 {
		t = min(t, d.RetryAfter)
	}
	return max(t, 0)
}

// nextAfter is NextAfter before the bound of a denial's RetryAfter.
func (p *params) nextAfter(a Algorithm, d *Decision) time.Duration {
	tick := time.Duration(p.tick) * time.Microsecond
	spacing := ceilDiv(p.period, p.rate) // ticks between two units
	switch a {
	case TokenBucket, GCRA, LeakyBucket:
		capacity := p.burst
		if a == LeakyBucket {
			capacity++ // it admits Burst+1 at once
		}
		if d.ResetAfter <= 0 {
			return p.dur(spacing)
		}
		// The bucket's debt D (token-ticks; for the leaky bucket the
		// queue's, in parts) gives Remaining R = (capacity×Period − D) /
		// Period, rounded down, and ResetAfter = D/Rate, rounded up: R
		// grows once D is down to (capacity − R − 1) × Period, that many
		// spacings before ResetAfter. Rounding the spacings down keeps
		// the result at or above the exact one, at most a tick above.
		r := min(max(d.Remaining, 0), capacity)
		reset := ceilDiv(int64(d.ResetAfter/time.Microsecond), p.tick)
		t := reset - floorDiv(max(capacity-r-1, 0)*p.period, p.rate)
		// A decision that does not fit a bucket (a request behind the
		// key's clock, whose waits carry how far behind it is, or a
		// decorator's figures): until full, which is never early.
		if t <= 0 || r > 0 && t > spacing+1 {
			return d.ResetAfter
		}
		return p.dur(t)
	case FixedWindow, SlidingWindowLog:
		if d.ResetAfter <= 0 {
			return time.Duration(p.period*p.tick) * time.Microsecond
		}
	case SlidingWindowCounter:
		if d.ResetAfter <= 0 {
			return time.Duration(p.period*p.tick)*time.Microsecond + tick
		}
	}
	return d.ResetAfter
}
