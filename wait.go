package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until a request of cost n for key is admitted, then returns
// its decision. For the leaky bucket it also waits out the admitted
// request's Delay (counted from the decision, so a store's round trip is
// part of it), so callers proceed evenly spaced; for the others it
// sleeps each RetryAfter and asks again.
//
// As x/time/rate's WaitN, it does not wait for what it cannot have: when
// ctx has a deadline and the request would be admitted (RetryAfter), or
// its leaky bucket slot would leave (Delay), at or after it, WaitN returns
// at once, having counted nothing, with the refused decision and an error
// wrapping context.DeadlineExceeded. For a leaky bucket whose queue
// (Burst × Period/Rate) lasts longer than the time left, a store that
// implements WithinTaker (memstore and redisstore do, and the fleet
// decorators over them) takes the slot only if it leaves in time, in one
// step. On another store (a store of your own without it, a fleet
// decorator over one, whose TakeWithin answers errors.ErrUnsupported)
// WaitN first asks the store at cost 0 when its queue's last slot leaves:
// a second store call, and two waiters of one key racing between the
// question and the take can still take a slot that leaves too late; that
// slot is given back, as below.
//
// It returns ctx.Err() if ctx ends first (a ctx ended before the call
// takes nothing), but the decision and no error if the slot has left by
// the time WaitN sees ctx end (both at once, its goroutine scheduled late,
// or the Limiter's clock past the slot's time): the request is counted and
// may proceed. A leaky bucket slot taken and not yet left when the wait
// fails is given back to a store that implements Refunder (memstore and
// redisstore do, and the fleet decorators over them), on a context of its
// own bounded by a second: nobody will leave in it, so the next request
// takes it (see Algorithm.Refund: requests already waiting keep their
// slots, so two may leave together, the count over time holding); on
// another store, or if the refund fails, it stays taken. It returns
// ErrNeverAllowed if n exceeds what the limit can ever admit.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	deadline, hasDeadline := ctx.Deadline()
	var d Decision
	for {
		// An ended ctx asks nothing more of the store: what it admitted
		// would be counted for a wait reported failed.
		if err := ctx.Err(); err != nil {
			return d, err
		}
		var err error
		left := time.Until(deadline)
		bounded := hasDeadline && n > 0 && l.alg == LeakyBucket && l.mayOutlast(n, left)
		wt, within := l.store.(WithinTaker)
		c := l.cur.Load()   // the limit the take counts under, to give back under
		var asked time.Time // when the take was asked
		if bounded && within {
			var late bool
			asked = l.clock()
			d, late, err = l.takeWithin(ctx, wt, key, n, left)
			switch {
			case err == nil && late:
				return d, pastDeadline(key, d.RetryAfter)
			case errors.Is(err, errors.ErrUnsupported):
				// A decorator over a store without it: nothing was
				// counted; ask, then take.
				within, err = false, nil
			}
		}
		switch {
		case bounded && within: // taken above
		case bounded:
			if d, err = l.overQueue(ctx, key, n, left); err != nil {
				return d, err
			}
			asked = l.clock()
			d, err = l.AllowN(ctx, key, n)
		default:
			asked = l.clock()
			d, err = l.AllowN(ctx, key, n)
		}
		if err != nil {
			return d, err
		}
		wait := d.Delay
		if wait > 0 {
			// The slot leaves Delay after the decision: what the
			// answer took to come back (a round trip to Redis) is
			// part of the wait, not added to it.
			if took := l.clock().Sub(asked); took > 0 {
				wait = max(0, wait-took)
			}
		}
		if d.Allowed && bounded && !within && wait > 0 && wait >= time.Until(deadline) {
			// Another waiter took the slot overQueue saw: this one is
			// counted, and leaves too late; nobody will leave in it.
			l.giveBack(ctx, c, key, n)
			return d, pastDeadline(key, wait)
		}
		if !d.Allowed {
			if d.RetryAfter < 0 {
				return d, fmt.Errorf("sluice: wait %q: %w", key, ErrNeverAllowed)
			}
			wait = max(d.RetryAfter, time.Microsecond)
			if hasDeadline && wait >= time.Until(deadline) {
				return d, pastDeadline(key, wait)
			}
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				if d.Allowed {
					// Both were ready and select chose ctx: prefer the
					// slot, counted and already left. (Stop cannot tell:
					// since Go 1.23 it reports true for a timer that
					// fired unreceived.)
					select {
					case <-t.C:
						return d, nil
					default:
					}
					if l.clock().Sub(asked) >= d.Delay {
						// Its time came by the Limiter's clock (this
						// goroutine ran late): the same.
						t.Stop()
						return d, nil
					}
					// The slot has not left and nobody will leave in
					// it: the next request takes it.
					l.giveBack(ctx, c, key, n)
				}
				t.Stop()
				return d, ctx.Err()
			case <-t.C:
			}
		}
		if d.Allowed {
			return d, nil
		}
	}
}

// refundTimeout bounds WaitN's giving back of a slot it will not use:
// the caller's context has ended, so the refund runs on a context of its
// own (with the caller's values).
const refundTimeout = time.Second

// giveBack gives the n units of a leaky bucket slot, taken for key under
// c and not yet left, back to a store with Refunder (a wait abandoned:
// nobody will leave in the slot, and the next request takes it). A store without it keeps the slot, as does a limit changed
// since the take. The refund's outcome is not reported: the wait has
// failed either way, and a slot not given back only delays the queue.
func (l *Limiter) giveBack(ctx context.Context, c *current, key string, n int64) {
	rf, ok := l.store.(Refunder)
	if !ok || n == 0 || c == nil || l.cur.Load() != c {
		return
	}
	r := c.req
	r.Key, r.Cost, r.Now = key, n, l.clock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	_, _ = rf.Refund(rctx, r)
}

// takeWithin takes a leaky bucket slot for a request of cost n for key
// only if it leaves before left has passed (a Delay under left): late
// reports one that would not, which is not counted.
func (l *Limiter) takeWithin(ctx context.Context, wt WithinTaker, key string, n int64, left time.Duration) (d Decision, late bool, err error) {
	r, err := l.Request(key, l.clock(), n)
	if err != nil {
		return Decision{}, false, err
	}
	return wt.TakeWithin(ctx, r, left-1)
}

// mayOutlast reports whether a leaky bucket request of cost n for key may
// be admitted with a Delay of left or more: whether the queue may last
// that long, and n may ever be admitted. When it may not, a plain take is
// safe: the store bounds the Delay.
func (l *Limiter) mayOutlast(n int64, left time.Duration) bool {
	lim := l.Limit()
	// An upper bound of the queue's length; past 2^63 ns, longer than any.
	spacing, burst := lim.Period/time.Duration(lim.Rate)+1, lim.BurstOrRate()
	return n <= burst+1 && (burst > math.MaxInt64/int64(spacing) || spacing*time.Duration(burst) >= left)
}

// overQueue asks a leaky bucket, without counting, when a request of cost
// n for key would leave: a request of cost 0 tells when the queue's last
// slot leaves, and ResetAfter is that plus one spacing, when the request's
// first unit would leave; the request leaves with its last unit, n-1
// spacings later. When that is not before left has passed, the result is
// the refusal WaitN returns; otherwise the error is nil. For stores
// without WithinTaker.
func (l *Limiter) overQueue(ctx context.Context, key string, n int64, left time.Duration) (Decision, error) {
	lim := l.Limit()
	d, err := l.AllowN(ctx, key, 0)
	if err != nil || !d.Allowed {
		return Decision{}, err // refused: in debt, WaitN's take says for how long
	}
	// The last unit leaves (n-1) × Period/Rate after the first, rounded
	// up; a product past 2^63 ns is past any deadline.
	leave := time.Duration(math.MaxInt64)
	if hi, lo := bits.Mul64(uint64(n-1), uint64(lim.Period)); hi == 0 && lo <= math.MaxInt64 {
		if rest := time.Duration(ceilDiv(int64(lo), lim.Rate)); rest <= math.MaxInt64-d.ResetAfter {
			leave = d.ResetAfter + rest
		}
	}
	if leave < left {
		return Decision{}, nil
	}
	d.Allowed, d.RetryAfter, d.Delay = false, d.ResetAfter, 0
	return d, pastDeadline(key, leave)
}

// pastDeadline is WaitN's error for a wait that would end past ctx's
// deadline.
func pastDeadline(key string, wait time.Duration) error {
	return fmt.Errorf("sluice: wait %q: admitted after %v, past the context's deadline: %w", key, wait, context.DeadlineExceeded)
}
