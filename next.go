package sluice

import (
	"math/bits"
	"time"
)

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

// RemainingAfter is at most what a key of a under l that answered d (as
// Take or Charge returns it) answers as its Remaining dt later, had
// nothing been taken from it meanwhile: what it refills in dt. A bucket's
// debt D (token-ticks) gives Remaining = capacity − ⌈D/Period⌉ and
// ResetAfter = D/Rate rounded up, so after dt its debt is at most
// (ResetAfter − dt)·Rate: for token_bucket, gcra and leaky_bucket the
// answer is exact or one unit short; a fixed window is full again at
// ResetAfter, its end, debt and all. The sliding windows tell when the
// limit is full again, not when each unit leaves: for them the answer is
// d's Remaining until ResetAfter (their units may all leave at its end: a
// log's all logged at one instant, a counter's all in its newest
// sub-window), the capacity from then on. For a decision that is not one
// of a's under l it is d's Remaining, what the key holds at least. A
// reader of a key's Remaining at two times takes RemainingAfter of the
// first less the second as what was taken between them, never more than
// was. One that can read the key's State takes RemainingAt instead, exact
// for every algorithm.
func (a Algorithm) RemainingAfter(d Decision, l Limit, dt time.Duration) int64 {
	c := a.Capacity(l)
	rem := min(max(d.Remaining, 0), c)
	if d.ResetAfter <= 0 || dt <= 0 {
		return rem
	}
	switch a {
	case FixedWindow, SlidingWindowLog, SlidingWindowCounter:
		if dt >= d.ResetAfter { // every unit has left, and any debt with it
			return c
		}
	case TokenBucket, GCRA, LeakyBucket:
		if dt >= d.ResetAfter {
			return c
		}
		t, err := l.Ticks()
		if err != nil || t.Tick <= 0 || t.Period <= 0 {
			return rem
		}
		tick := time.Duration(t.Tick) * time.Microsecond
		rest := uint64((d.ResetAfter - dt + tick - 1) / tick)
		hi, lo := bits.Mul64(rest, uint64(t.Rate))
		if hi >= uint64(t.Period) {
			return rem
		}
		missing, r := bits.Div64(hi, lo, uint64(t.Period))
		if r > 0 {
			missing++
		}
		if missing < uint64(c) {
			return max(rem, c-int64(missing))
		}
	}
	return rem
}

// RemainingAt is what a key of a under l whose state is st (as Take or
// Charge left it, or a store read it) answers as its Remaining at now, had
// nothing been taken from it since: Take of a copy of st, of cost 0, at
// now. It is exact for every algorithm, the sliding windows' units leaving
// as they do. A reader of a key's state, then of its Remaining at now (a
// question of cost 0), takes RemainingAt less that Remaining as what was
// taken between the two: exactly what was for requests counted in the
// window or bucket as it stands at now (a sliding window counter weighs a
// unit of an older sub-window as the estimate does, so less), never more.
// An invalid algorithm, limit or now gives 0, so nothing taken.
func (a Algorithm) RemainingAt(st State, l Limit, now time.Time) int64 {
	c := st.Clone()
	d, _, err := a.Take(&c, l, now, 0)
	if err != nil {
		return 0
	}
	return max(d.Remaining, 0)
}
