package sluice

import (
	"fmt"
	"time"
)

// Refund, for store authors, gives back cost units of l's allowance to the
// key whose state is *st, at now: for work that was counted and then not
// done (a request given up after it was admitted, Envoy's negative hits).
// It returns the Decision a request of cost 0 at now gets right after it,
// and the instant from which *st is at rest, as Take does.
//
// What giving back is, per algorithm:
//
//	token_bucket            cost tokens go back into the bucket, up to its Burst
//	gcra, leaky_bucket      the theoretical arrival time (the leaky bucket's: its
//	                        next unit's leave) moves back cost spacings, never before now
//	fixed_window            the current window's count goes down by cost, to 0 at least
//	sliding_window_counter  the sliding window's count goes down by cost, newest
//	                        sub-window first (its oldest, partly weighed, last)
//	sliding_window_log      up to cost of the newest times in the window are dropped
//
// A refund never gives back more than the key has counted: on a key at
// rest (a full bucket, an empty window) it changes nothing. It gives back
// units, not a particular request's: a refund exactly undoes a request of
// the same cost only when nothing else touched the key in between (and,
// for the windows, in the same window). The debt of a forced charge
// (Charge) is given back as any other count; a charge whose debt was
// capped left less than its cost to give back.
//
// Refund is pure, as Take is. A cost of 0 is Take at cost 0; a negative
// cost is an error wrapping ErrInvalidCost.
func (a Algorithm) Refund(st *State, l Limit, now time.Time, cost int64) (Decision, time.Time, error) {
	var d Decision
	if err := CheckTime(now); err != nil {
		return d, time.Time{}, err
	}
	idle, err := a.RefundMicro(&d, st, &l, now.UnixMicro(), cost)
	return d, time.UnixMicro(idle), err
}

// RefundMicro is Refund as TakeMicro is Take.
//
// It runs in three steps, which the Redis store's Lua twin repeats: a
// request of cost 0 (which brings *st to now: refills the bucket, rolls
// the window, drops the times that left the log), the giving back, and a
// request of cost 0 again, whose outcome it returns.
func (a Algorithm) RefundMicro(d *Decision, st *State, l *Limit, nowMicro, cost int64) (idle int64, err error) {
	if cost < 0 {
		return 0, fmt.Errorf("%w: %d is negative", ErrInvalidCost, cost)
	}
	if _, err := a.step(d, st, l, nowMicro, 0, false); err != nil {
		return 0, err
	}
	var p params
	_ = l.paramsTo(&p) // valid: step checked it
	giveBack(a, st, &p, p.ticks(nowMicro), cost)
	return a.step(d, st, l, nowMicro, 0, false)
}

// giveBack gives cost units back to st, which a request of cost 0 at now
// has just brought to now (see Algorithm.Refund).
func giveBack(a Algorithm, st *State, p *params, now, cost int64) {
	switch a {
	case TokenBucket:
		st.N = lessUnits(st.N, cost, p.period)
	case GCRA:
		ahead := st.T - now
		if ahead < 0 || ahead == 0 && st.N == 0 {
			return // full: nothing to give back
		}
		now, ahead = withinCap(st, p, now, ahead)
		debt := lessUnits(ahead*p.rate+st.N, cost, p.period)
		st.T = now + debt/p.rate
		st.N = debt % p.rate
	case LeakyBucket:
		if st.M == 0 || now-st.T > ceilDiv((p.burst+1)*p.period, p.rate)+1 {
			return // stale: an empty queue (see leakyBucket)
		}
		now, ahead := withinCap(st, p, now, st.T-now)
		// The next unit leaves a spacing after the last: rel + Period
		// from now, which moves back to now at the earliest.
		rel := ahead*p.rate + st.N
		if rel <= -p.period {
			return // an empty queue
		}
		rel = lessUnits(rel+p.period, cost, p.period) - p.period
		q := floorDiv(rel, p.rate)
		st.T = now + q
		st.N = rel - q*p.rate
	case FixedWindow:
		st.N = lessUnits(st.N, cost, 1)
	case SlidingWindowLog:
		n := int64(len(st.Log))
		st.Log = st.Log[:n-min(n, cost)]
		if len(st.Log) == 0 {
			st.Log = nil
		}
	case SlidingWindowCounter:
		c := counts{st: st, s: p.segments}
		for j := st.T; j >= st.T-p.segments && cost > 0; j-- {
			sl := c.slot(j)
			x := min(*sl, cost)
			*sl -= x
			cost -= x
		}
	}
}

// withinCap returns now and ahead (st.T − now) for a refund of GCRA or
// the leaky bucket: as they are, unless the debt, ahead × Rate + st.N,
// is past debtCap (a request far behind T, see gcra), when the refund is
// counted from the earliest instant from which it is within the cap: it
// then moves T back no further than that instant, which gives back less,
// never more, and keeps the products exact.
func withinCap(st *State, p *params, now, ahead int64) (int64, int64) {
	if m := floorDiv(debtCap(p)-st.N, p.rate); ahead > m {
		m = max(m, 0)
		return st.T - m, m
	}
	return now, ahead
}

// lessUnits returns n less cost × unit, at least 0, without overflowing.
func lessUnits(n, cost, unit int64) int64 {
	if cost >= ceilDiv(n, unit) {
		return 0
	}
	return n - cost*unit
}
