package fleet

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// A Lease's entry for a key, and its arithmetic on the store's state at
// the last grant: how long until the store can give what a request needs
// (retry), how many of a bucket's units are still good (valid), what is
// left (info), and whether a query is refused for a report's debt (fits).

type leaseEntry struct {
	key   nsKey
	alg   sluice.Algorithm
	limit sluice.Limit
	ticks sluice.Ticks

	mu        sync.Mutex
	dead      atomic.Bool  // swept: look the key up again
	used      int64        // µs: the latest request time decided
	units     int64        // reserved, not spent
	window    int64        // the State.T of the grant, to give units back
	until     int64        // µs: the units expire then
	expired   int64        // units of an expired lease, given back with the next grant
	expWindow int64        // their window
	read      bool         // st holds the store's state at a grant
	st        sluice.State // the store's state after the last grant
	gnow      int64        // µs: the store's time at it
	skew      int64        // µs: the instance's clock minus the store's, at it
	denyUntil int64        // µs: the store has nothing for us until then…
	denyNeed  int64        // …for requests needing this many units or more
	// given: units of the key were given back elsewhere since (ForgetKey),
	// so denyUntil no longer holds; read and cleared under mu.
	given atomic.Bool
	// own: the store decides on its own clock (redisstore's RedisTime).
	// Then mono is this machine's time when the last grant was asked, at
	// ownAt on the entry's clock (see clock).
	own   bool
	ownAt int64
	mono  time.Time
}

// clock is now in µs on the entry's clock: the requests' clock (now's own,
// now.UnixMicro()), but over a store on its own clock never behind the
// instant of the last grant plus the time this machine's monotonic clock
// says has passed since. Every instant the entry keeps (until, denyUntil,
// skew) is on it. So a requests' clock that steps back after a grant (an
// NTP step, a VM resumed, a caller whose clock lags another's) does not
// make the units outlive what the store counted them for: a window's past
// its end in the store, a bucket's past the refill that lapses them. They
// would be spent there on top of what the store gives the other
// instances, and the fleet pass the limit. The grant decided after it
// was asked, so the instant is no earlier than the store's, and units
// expire at worst a round trip early. e.mu is held.
func (e *leaseEntry) clock(now time.Time) int64 {
	us := now.UnixMicro()
	if e.own {
		us = max(us, e.ownAt+time.Since(e.mono).Microseconds())
	}
	return us
}

// retry is how long from us until the store's state at the last grant, with
// the units held given back, can give need units (for a bucket, at least a
// chunk's worth, so that a drained bucket is not asked once per refilled
// token by every instance). e.mu is held.
func (e *leaseEntry) retry(us, need, chunk int64) time.Duration {
	ask := need
	if e.alg == sluice.TokenBucket || e.alg == sluice.GCRA {
		ask = min(e.ticks.Burst, max(need, (e.ticks.Burst+autoShare*4-1)/(autoShare*4), chunk))
	}
	st := e.st
	giveBack(e.alg, &e.ticks, &st, e.units, e.window, e.gnow)
	giveBack(e.alg, &e.ticks, &st, e.expired, e.expWindow, e.gnow)
	var w sluice.Decision
	if _, err := e.alg.TakeMicro(&w, &st, &e.limit, us-e.skew, ask); err != nil || w.Allowed {
		return 0
	}
	return w.RetryAfter
}

// valid is how many units a bucket's lease may still spend at us. The
// store's debt refills from the oldest tokens up, and the units held are
// the newest: they are good while the debt the store had at the last grant,
// refilled until us, still covers them. Past that, spending one would let
// the fleet pass the burst (the store would count it as refilled).
func (e *leaseEntry) valid(us int64) int64 {
	if !e.read {
		return 0
	}
	t := &e.ticks
	st := e.st
	d := debtAt(e.alg, t, &st, floorDiv(us-e.skew, t.Tick))
	return d / t.Period
}

// info sets d's Remaining and ResetAfter at us: what the store's state at
// the last grant, with the units this instance holds given back, has left
// at us (refilled, or in a new window), as if no other instance had taken
// any since. e.mu is held.
func (e *leaseEntry) info(us int64, d *sluice.Decision) {
	d.Remaining, d.ResetAfter = e.units, 0
	if !e.read {
		return
	}
	st := e.st
	giveBack(e.alg, &e.ticks, &st, e.units, e.window, e.gnow)
	giveBack(e.alg, &e.ticks, &st, e.expired, e.expWindow, e.gnow)
	var q sluice.Decision
	if _, err := e.alg.TakeMicro(&q, &st, &e.limit, us-e.skew, 0); err == nil {
		d.Remaining = max(0, q.Remaining)
		d.ResetAfter = q.ResetAfter
	}
}

// fits is whether a request of need units, held, is admitted: always,
// except a query (need 0) while the store's state is in debt after a
// report (Request.Force), which is refused as the store would refuse it,
// with its RetryAfter. e.mu is held.
func (e *leaseEntry) fits(us, need int64, d *sluice.Decision) bool {
	if need > 0 || !e.read {
		return true
	}
	st := e.st
	giveBack(e.alg, &e.ticks, &st, e.units, e.window, e.gnow)
	giveBack(e.alg, &e.ticks, &st, e.expired, e.expWindow, e.gnow)
	var q sluice.Decision
	if _, err := e.alg.TakeMicro(&q, &st, &e.limit, us-e.skew, 0); err != nil || q.Allowed {
		return true
	}
	d.RetryAfter = q.RetryAfter
	return false
}
