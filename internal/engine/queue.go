package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
)

// A delay rule on a leaky bucket whose queue lasts longer than max_delay
// (burst × period/rate > max_delay: any "N/m" rule under the default
// max_delay of 1s) would have the store admit, and so count, a request
// whose slot leaves later than the request may wait. Admit would then
// refuse it with its slot taken and its other rules charged: a refused
// request would push every later request's slot further out, so that a
// client keeping to the rate after a burst was refused for ever.
//
// overQueue asks first, without counting: a request of cost 0 to the
// leaky bucket tells when its queue's last request leaves (ResetAfter is
// that time plus one spacing), and so how long a request of cost c would
// wait: it leaves with its last unit, c spacings after the queue's last
// (c-1 after now on an idle queue). If that is longer than the request may still wait, it is refused
// there and then, having taken nothing. Only such rules pay this second
// round trip; a queue no longer than max_delay is bounded by the store
// itself. Two requests of one key racing between the question and the
// take can still meet Admit's later check (the slot taken, the request
// refused), as before; the refused one then gives back what it took, on a
// store with sluice.Refunder (giveBack).

// overQueue decides, without counting, whether a delay rule of ms refuses
// a request of cost c that has already waited elapsed. ok reports that it
// does: res is the refusal, and a holds the refusing rule and decision for
// finish.
func (e *Engine) overQueue(ctx context.Context, a *attempt, ms []rules.Match, cost int64, elapsed time.Duration) (res Result, ok bool) {
	if cost <= 0 {
		return Result{}, false // a request of cost 0 takes no slot
	}
	budget := time.Duration(-1)
	ask := false
	for i := range ms {
		r := ms[i].Rule
		if r.Action != rules.Delay {
			continue
		}
		if budget < 0 || r.MaxDelay < budget {
			budget = r.MaxDelay
		}
		ask = ask || asksQueue(r, cost)
	}
	left := budget - elapsed
	if !ask || left < 0 {
		return Result{}, false
	}
	now := e.now()
	p := getAttempt()
	defer putAttempt(p)
	for i := range ms {
		r := ms[i].Rule
		if r.Action != rules.Delay || !asksQueue(r, cost) || queueLen(r) <= left {
			continue
		}
		p.rs = append(p.rs, sluice.Request{Key: ms[i].Key, Algorithm: r.Algorithm, Limit: r.Limit, Cost: 0, Now: now})
		p.rules = append(p.rules, r)
	}
	if len(p.rs) == 0 {
		return Result{}, false
	}
	p.ds = append(p.ds[:0], make([]sluice.Decision, len(p.rs))...)
	t0 := now
	if !e.realClock {
		t0 = time.Now()
	}
	err := e.take(ctx, p)
	a.timed(t0)
	if err != nil {
		return Result{}, false // decide asks again and answers the failure
	}
	best, over := -1, time.Duration(0)
	for i := range p.ds {
		d, r := &p.ds[i], p.rules[i]
		if !d.Allowed {
			continue // in debt: the store refuses the request itself
		}
		// ResetAfter is the queue's last leave plus one spacing: when the
		// request's first unit leaves (0: the last leave a spacing ago or
		// more, at once); the request leaves with its last, cost-1
		// spacings later.
		spacing := time.Duration(int64(r.Limit.Period) / r.Limit.Rate)
		wait := d.ResetAfter + time.Duration(cost-1)*spacing
		if wait > left && wait-left > over {
			best, over = i, wait-left
		}
	}
	if best < 0 {
		return Result{}, false
	}
	r, d := p.rules[best], p.ds[best]
	d.Allowed, d.RetryAfter, d.Delay = false, over, 0
	a.reset()
	a.rules = append(a.rules, r)
	a.ds = append(a.ds[:0], d)
	return Result{Rule: r, DeniedBy: r, Decision: d, Waited: elapsed, at: now, retry: -1, budget: budget}, true
}

// asksQueue reports whether r may need overQueue for a request of cost:
// a leaky bucket under action delay, not sharded (a shard is chosen per
// request, so the question could go to another shard than the take), and
// cost within what its queue can ever hold (beyond, the store refuses).
func asksQueue(r *rules.Rule, cost int64) bool {
	return r.Action == rules.Delay && r.Algorithm == sluice.LeakyBucket && r.Shards.IsZero() &&
		cost <= r.Limit.BurstOrRate()+1
}

// queueLen is how long the queue of leaky bucket rule r lasts: burst
// spacings of period/rate.
func queueLen(r *rules.Rule) time.Duration {
	return time.Duration(int64(r.Limit.Period) / r.Limit.Rate * r.Limit.BurstOrRate())
}
