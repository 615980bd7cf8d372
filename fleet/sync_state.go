package fleet

import (
	"math/bits"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// The steps below mirror fleet.lua in redisstore: what a hit counted
// elsewhere does to a key's state, and how far over its limit a state is.

// addHit adds a hit that was already admitted to st, without a check: the
// Go twin of fleet.lua's sync mode, for one hit.
func addHit(a sluice.Algorithm, t *sluice.Ticks, st *sluice.State, h redisstore.Hit) {
	at := floorDiv(h.At, t.Tick)
	limit, unit := chargeCap(a, t)
	switch a {
	case sluice.TokenBucket, sluice.GCRA:
		d := debtAt(a, t, st, at)
		addCapped(&d, h.Cost, unit, limit)
		setDebt(a, t, st, at, d)
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
