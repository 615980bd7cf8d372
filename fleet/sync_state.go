package fleet

import (
	"math/bits"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// The steps below mirror fleet.lua in redisstore: what a hit counted
// elsewhere does to a key's state, and how far over its limit a state is.

// addHit adds a hit that was already admitted to st, without a check: the
// Go twin of fleet.lua's sync mode, for one hit (redisstore.Hit says what
// a bucket's hit means).
func addHit(a sluice.Algorithm, t *sluice.Ticks, st *sluice.State, h redisstore.Hit) {
	at := floorDiv(h.At, t.Tick)
	limit, unit := chargeCap(a, t)
	switch a {
	case sluice.TokenBucket, sluice.GCRA:
		from := at
		if h.From != 0 {
			from = floorDiv(h.From, t.Tick)
		}
		d := debtAt(a, t, st, from)
		v := max(d+h.Cost, h.Floor)
		if v > limit {
			v = max(d, limit)
		}
		setDebt(a, t, st, at, v)
		if a == sluice.GCRA {
			// The latest debt added (sluice's gcra), by any hit: a
			// folded hit's cost may be net of the refill.
			st.M = max(st.M, at)
		}
	case sluice.FixedWindow, sluice.SlidingWindowCounter:
		w := floorDiv(at, t.Period)
		advance(a, st, w)
		if w == st.T {
			addCapped(&st.N, h.Cost, unit, limit)
		} else if a == sluice.SlidingWindowCounter && w == st.T-1 {
			addCapped(&st.M, h.Cost, unit, limit)
		}
	}
}

// chargeCap is the most a forced charge (Request.Force) leaves in a state,
// as sluice's Charge caps it: a bucket's debt in token-ticks (unit Period
// per token), a window's count (unit 1). Adding a hit stops there too, as
// the charge that made it did: a single instance then keeps exactly the
// reference's state, however far past its limit reports push a key.
func chargeCap(a sluice.Algorithm, t *sluice.Ticks) (limit, unit int64) {
	switch a {
	case sluice.TokenBucket, sluice.GCRA:
		return max(1<<50, (t.Burst+1)*t.Period), t.Period
	case sluice.FixedWindow:
		return max(1<<50, t.Rate+1), 1
	default: // the sliding window counter, one segment
		return max(t.Rate+1, (1<<49)/t.Period), 1
	}
}

// capCost is the cost past which a hit adds nothing more: any cost from
// it up reaches chargeCap from an empty state. Hits are clamped to it, so
// that summing them cannot overflow.
func capCost(a sluice.Algorithm, t *sluice.Ticks) int64 {
	limit, unit := chargeCap(a, t)
	return limit/unit + 1
}

// Hits fold exactly. A bucket's hit h leaves debt max(h.Floor, d + h.Cost)
// at h.At for debt d at h.From: the refill in between is in h.Cost, the
// refill's stop at an empty bucket in h.Floor. Two such hits in a row are
// one: from debt d, the first leaves max(L1, d + A1); the refill r up to
// the second's From leaves max(0, L1 − r, d + A1 − r); the second then
// leaves max(L2, A2 + max(0, L1 − r), d + A1 − r + A2). So they fold into
// one hit from the first's From to the second's At, with Cost A1 − r + A2
// and Floor max(L2, A2 + max(0, L1 − r)). A plain hit spans one instant,
// with Floor 0.
//
// Nothing is capped on the way: a hit's cost is the debt its request added
// to the instance's view, capped there, so a single instance's hits never
// take the state past the cap (chargeCap), and the debt at a hit's From is
// within it too. That bounds the numbers: a Cost below −cap leaves only the
// Floor from any debt, so fold clamps it there; a Floor past the cap is one
// the instance never saw. fleet.lua's arithmetic then stays exact (integers
// below 2^53).

// fold shortens a bucket's hits to at most keep (at least 1), exactly,
// folding the last two into one (see above) while there are more. The hits
// must be in order (see inOrder). It is exact from any state whose clock is
// not past the first hit's (the fleet is not exact anyway when another
// instance's clock runs ahead). Window hits it leaves as they are.
func fold(a sluice.Algorithm, t *sluice.Ticks, hits []redisstore.Hit, keep int) []redisstore.Hit {
	if a != sluice.TokenBucket && a != sluice.GCRA || len(hits) <= max(1, keep) {
		return hits
	}
	limit, _ := chargeCap(a, t)
	for n := len(hits); n > max(1, keep); n-- {
		x, y := &hits[n-2], hits[n-1]
		from := y.At
		if y.From != 0 {
			from = y.From
		}
		r := refill(t, floorDiv(from, t.Tick)-floorDiv(x.At, t.Tick), limit)
		if x.From == 0 {
			x.From = x.At
		}
		x.Floor = min(limit, max(y.Floor, y.Cost+max(0, x.Floor-r)))
		x.Cost = max(-limit, x.Cost-r+y.Cost)
		x.At = y.At
		hits = hits[:n-1]
	}
	return hits
}

// inOrder stamps a bucket's hits that are stamped before an earlier one
// with that one's time, where they act anyway: a bucket's clock only moves
// forward. fold needs them so.
func inOrder(hits []redisstore.Hit) {
	for i := 1; i < len(hits); i++ {
		prev := hits[i-1].At
		hits[i].At = max(hits[i].At, prev)
		if hits[i].From != 0 {
			hits[i].From = max(hits[i].From, prev)
		}
	}
}

// refill is the debt a bucket pays back in dt ticks, at most 4 × limit
// (past 2 × limit the fold's clamp decides the same).
func refill(t *sluice.Ticks, dt, limit int64) int64 {
	if dt <= 0 {
		return 0
	}
	if dt >= 4*limit/t.Rate {
		return 4 * limit
	}
	return dt * t.Rate
}

// addCapped is sluice's addCapped: *n + cost × unit, at most up to limit
// (an *n already past it stays).
func addCapped(n *int64, cost, unit, limit int64) {
	if cost > (limit-*n)/unit {
		*n = max(*n, limit)
	} else {
		*n += cost * unit
	}
}

// debtAt is a bucket's debt (token-ticks) at now.
func debtAt(a sluice.Algorithm, t *sluice.Ticks, st *sluice.State, now int64) int64 {
	if a == sluice.TokenBucket {
		if st.N > 0 && now > st.T {
			hi, r := bits.Mul64(uint64(now-st.T), uint64(t.Rate))
			if hi != 0 || r >= uint64(st.N) {
				return 0
			}
			return st.N - int64(r)
		}
		return st.N
	}
	if st.T > now || (st.T == now && st.N > 0) {
		return (st.T-now)*t.Rate + st.N
	}
	return 0
}

func setDebt(a sluice.Algorithm, t *sluice.Ticks, st *sluice.State, now, d int64) {
	if a == sluice.TokenBucket {
		st.N = d
		st.T = max(st.T, now)
		return
	}
	st.N = d % t.Rate
	st.T = now + d/t.Rate
}

// advance moves a window algorithm's state to window w at least.
func advance(a sluice.Algorithm, st *sluice.State, w int64) {
	if w <= st.T {
		return
	}
	if a == sluice.SlidingWindowCounter && w == st.T+1 {
		st.M = st.N
	} else {
		st.M = 0
	}
	st.T, st.N = w, 0
}

// overshoot is how many units st has admitted beyond the limit at now (µs),
// as far as the state shows: a window's count (or the counter's estimate)
// above Rate, a bucket's debt beyond Burst. 0 when within.
func overshoot(a sluice.Algorithm, t *sluice.Ticks, st *sluice.State, us int64) int64 {
	now := floorDiv(us, t.Tick)
	switch a {
	case sluice.TokenBucket, sluice.GCRA:
		return max(0, debtAt(a, t, st, now)-t.Burst*t.Period) / t.Period
	case sluice.FixedWindow:
		if st.T == floorDiv(now, t.Period) {
			return max(0, st.N-t.Rate)
		}
	case sluice.SlidingWindowCounter:
		k := floorDiv(now, t.Period)
		var est int64
		switch k {
		case st.T:
			est = st.M*((k+1)*t.Period-now)/t.Period + st.N
		case st.T + 1:
			est = st.N * ((k+1)*t.Period - now) / t.Period
		}
		return max(0, est-t.Rate)
	}
	return 0
}

// windowStart is the first µs of the window a window algorithm's state is
// in, for recording a hit in the window it was counted in.
func windowStart(t *sluice.Ticks, st *sluice.State) int64 { return st.T * t.Period * t.Tick }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// giveBack returns units not spent, granted in window w, at now (µs): the
// Go twin of fleet.lua's return mode.
func giveBack(a sluice.Algorithm, t *sluice.Ticks, st *sluice.State, units, w, us int64) {
	if units <= 0 {
		return
	}
	switch a {
	case sluice.TokenBucket, sluice.GCRA:
		now := floorDiv(us, t.Tick)
		setDebt(a, t, st, now, max(0, debtAt(a, t, st, now)-units*t.Period))
	case sluice.FixedWindow, sluice.SlidingWindowCounter:
		if w == st.T {
			st.N = max(0, st.N-units)
		} else if a == sluice.SlidingWindowCounter && w == st.T-1 {
			st.M = max(0, st.M-units)
		}
	}
}
