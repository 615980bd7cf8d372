package sluice

import "math/bits"

// The token bucket and GCRA are one algorithm kept two ways. Both track the
// bucket's debt: how far it is from full, in token-ticks (a token is worth
// Period ticks, and the bucket refills Rate token-ticks per tick). Exact
// integers throughout, so GCRA decides exactly as the token bucket does.

// tokenBucket keeps (last refill, debt): the classic "tokens, last refill", with
// the tokens stored as the debt so that the zero State is a full bucket.
func tokenBucket(st *State, p *params, now, cost int64, force bool, o *outcome) {
	debt := st.N
	if debt > 0 && now > st.T {
		// Refill elapsed × Rate, up to full; the product may overflow when
		// the key has been idle for long, which means full too.
		hi, refill := bits.Mul64(uint64(now-st.T), uint64(p.rate))
		if hi != 0 || refill >= uint64(debt) {
			debt = 0
		} else {
			debt -= int64(refill)
		}
	}
	takeDebt(p, now, &debt, cost, force, o)
	// At rest once the debt has refilled from the last refill, which a
	// request from before it (a clock behind the others') does not move
	// back: counted from its own now, a store keeping state by the
	// requests' time would drop the key early and forget its debt. Its
	// waits run from the last refill too, told on its own clock.
	o.idle = max(st.T, now) + o.reset
	if ahead := st.T - now; ahead > 0 && debt > 0 {
		o.reset += ahead
		if o.retry >= 0 {
			o.retry += ahead
		}
	}
	st.T = max(st.T, now)
	st.N = debt
}

// gcra keeps the theoretical arrival time: the instant the bucket is full
// again, as whole ticks (T) plus a fraction in 1/Rate of a tick (N); and
// M, the latest instant at which a request added debt. M decides nothing
// here: the Redis store's refund (a TakeAll across Cluster slots) needs it
// to give back no more than the request left, and keeps it so, as the
// leaky bucket's M.
func gcra(st *State, p *params, now, cost int64, force bool, o *outcome) {
	if ahead := st.T - now; ahead > 0 && ahead > floorDiv(debtCap(p)-st.N, p.rate) {
		// A request so far behind T (its clock behind the one that set
		// the state) that its debt, ahead × Rate + N, is past the cap:
		// refused, and nothing counted (a charge adds nothing past the
		// cap). The product may pass 2^63, so the figures are split.
		farBehind(p, ahead, st.N, p.burst*p.period, cost, cost <= p.burst, force, o)
		o.reset = ahead + ceilDiv(st.N, p.rate)
		o.idle = now + o.reset
		return
	}
	var debt int64
	if st.T > now || (st.T == now && st.N > 0) {
		debt = (st.T-now)*p.rate + st.N
	}
	before := debt
	takeDebt(p, now, &debt, cost, force, o)
	st.T = now + debt/p.rate
	st.N = debt % p.rate
	if debt > before {
		st.M = max(st.M, now) // see gcra's doc
	}
}

// farBehind writes the refusal of a request whose debt (a bucket's, or the
// leaky bucket's last leave in parts), ahead × Rate + n, is past debtCap:
// its retry, split as ahead whole ticks plus the rest, from room, the most
// debt at which it would be admitted. Remaining is 0; the caller sets reset
// and idle.
func farBehind(p *params, ahead, n, room, cost int64, fits, force bool, o *outcome) {
	switch {
	case force:
		o.retry = ahead + ceilDiv(n+p.period-room, p.rate) // for a cost of 1
	case !fits:
		o.retry = -1
	default:
		o.retry = ahead + ceilDiv(n+cost*p.period-room, p.rate)
	}
}

// debtCap is the most debt a forced charge leaves (see Algorithm.Charge),
// in token-ticks or, for the leaky bucket, in parts: within 2^53 with now
// added (GCRA's and the leaky bucket's T is now + debt/Rate).
func debtCap(p *params) int64 { return max(1<<50, (p.burst+1)*p.period) }

// addCapped adds cost × unit to *n, at most up to limit.
func addCapped(n *int64, cost, unit, limit int64) {
	if cost > (limit-*n)/unit {
		*n = max(*n, limit)
	} else {
		*n += cost * unit
	}
}

// takeDebt admits cost tokens against *debt; with force it charges them
// even when they do not fit.
func takeDebt(p *params, now int64, debt *int64, cost int64, force bool, o *outcome) {
	capacity := p.burst * p.period
	switch {
	case cost <= p.burst && *debt+cost*p.period <= capacity:
		o.allowed = true
		*debt += cost * p.period
	case force:
		addCapped(debt, cost, p.period, debtCap(p))
		o.retry = ceilDiv(*debt+p.period-capacity, p.rate) // for a cost of 1
	case cost > p.burst:
		o.retry = -1
	default:
		o.retry = ceilDiv(*debt+cost*p.period-capacity, p.rate)
	}
	o.remaining = max(0, (capacity-*debt)/p.period)
	o.reset = ceilDiv(*debt, p.rate)
	o.idle = now + o.reset
}

// leakyBucket is the queue (nginx's burst) kept as a time, the leave of the
// last unit queued. A request of cost n is n units, one spacing (Period/Rate)
// apart: the first leaves at max(now, last leave + Period/Rate), the last
// n-1 spacings later, and the request waits until its last unit leaves (its
// Delay: behind a busy queue, last leave + n × Period/Rate − now), as n
// requests of cost 1 would; the next request queues behind it. It is
// admitted iff that Delay is at most Burst × Period/Rate: at most Burst+1
// units at an instant, whatever the costs. Times relative to now are in parts of 1/Rate of a tick, so
// Period/Rate is exactly Period parts.
func leakyBucket(st *State, p *params, now, cost int64, force bool, o *outcome) {
	maxWait := p.burst * p.period // parts
	full := (p.burst + 1) * p.period
	// rel is the last leave time relative to now, in parts. A leave so far
	// back that even a request of cost Burst+1 would leave now counts as
	// none (the zero State), which keeps the product below from overflowing.
	stale := st.M == 0 || now-st.T > ceilDiv(full, p.rate)+1
	if ahead := st.T - now; !stale && ahead > 0 && ahead > floorDiv(debtCap(p)-st.N, p.rate) {
		// As in gcra: a request so far behind that its queue is past
		// the cap is refused, nothing counted, the figures split.
		farBehind(p, ahead, st.N, maxWait, cost, cost <= p.burst+1, force, o)
		o.reset = ahead + ceilDiv(st.N+p.period, p.rate)
		o.idle = now + ahead + ceilDiv(st.N+full, p.rate)
		return
	}
	var rel int64
	if !stale {
		rel = (st.T-now)*p.rate + st.N
	}
	fits := cost <= p.burst+1
	// first is when the request's first unit leaves and leave when its
	// last unit, and so the request, does, relative to now. A cost of 0
	// asks without queueing anything: both are the queue's last leave.
	first, leave := int64(0), int64(0)
	switch {
	case !fits:
	case cost == 0:
		if !stale {
			first = max(0, rel)
			leave = first
		}
	default:
		if !stale {
			first = max(0, rel+p.period)
		}
		leave = first + (cost-1)*p.period
	}
	switch {
	case fits && leave <= maxWait:
		o.allowed = true
		o.delay = ceilDiv(leave, p.rate)
		if cost > 0 {
			rel, stale = leave, false
			st.T = now + leave/p.rate
			st.N = leave % p.rate
			st.M = max(st.M, now, 1)
		}
	case force:
		// Charged past the queue: the cost joins the queue's end, cost
		// spacings after max(now, the last leave), and nothing waits for
		// it (the work is done already).
		leave = 0
		if !stale {
			leave = max(0, rel)
		}
		addCapped(&leave, cost, p.period, debtCap(p))
		rel, stale = leave, false
		st.T = now + leave/p.rate
		st.N = leave % p.rate
		st.M = max(st.M, now, 1)
		o.retry = ceilDiv(leave+p.period-maxWait, p.rate) // for a cost of 1
	case !fits:
		o.retry = -1
	default:
		o.retry = ceilDiv(leave-maxWait, p.rate)
	}
	if stale {
		o.remaining = p.burst + 1
		o.idle = now
		return
	}
	// Remaining is back to Burst+1 once the last leave is a spacing behind,
	// but the state rests only when a request of cost Burst+1 would leave
	// at once too.
	o.remaining = max(0, min(p.burst+1, floorDiv(maxWait-rel, p.period)))
	o.reset = max(0, ceilDiv(rel+p.period, p.rate))
	o.idle = now + max(0, ceilDiv(rel+full, p.rate))
}
