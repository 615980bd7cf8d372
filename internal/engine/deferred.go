package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
)

// AdmitOrDefer is Admit for an edge that queues a request denied only by
// defer rules (Result.Deferrable) instead of refusing it, the reverse
// proxy: such a request must pass every other enforcing rule it matches,
// as an admitted one does, the defer rule only shifting it in time. So
// they are charged for it then, all or nothing (chargeOthers), and the
// request stays Deferrable only if they all allowed it; if one refuses,
// the Result is that rule's refusal, Deferrable false, nothing charged.
// The defer rules are not charged: the replay asks them. An edge that
// then does not queue the request gives the charge back with NotQueued.
func (e *Engine) AdmitOrDefer(ctx context.Context, ms []rules.Match, cost int64) Result {
	return e.admit(ctx, ms, cost, true)
}

// chargeOthers charges, for a request res found Deferrable (denied only by
// defer rules, so that nothing was charged), its other enforcing rules in
// a: all or nothing, in one TakeAll (a Take for one), as Admit takes them
// for an admitted request, at the decision's instant. They all allow it:
// they are charged, a holds their decisions, and res stays Deferrable
// (its figures the defer rule's), keeping the requests charged for
// NotQueued. One refuses: nothing is charged and res
// becomes that rule's refusal (the longest RetryAfter if several), not
// Deferrable. The store fails: on_error allow lets it pass them, charged
// nothing (counted as a fallback to allow); deny makes res the store
// failure (503), not Deferrable; a client gone ends res as in Admit.
//
// Not atomic with the decision that found res Deferrable (TakeAll is all
// or nothing: that one, refused by the defer rule, charged nothing), but a
// request of the same keys between the two is decided by the store as any
// other, and this take, itself atomic, has the last word.
func (e *Engine) chargeOthers(ctx context.Context, a *attempt, res *Result) {
	p := getAttempt()
	defer putAttempt(p)
	var idx [8]int
	at := idx[:0]
	for i := range a.rs {
		if a.rules[i].Action == rules.Defer {
			continue
		}
		p.rs = append(p.rs, a.rs[i])
		at = append(at, i)
	}
	if len(p.rs) == 0 {
		return
	}
	p.ds = append(p.ds[:0], make([]sluice.Decision, len(p.rs))...)
	t0 := time.Now()
	err := e.take(ctx, p)
	a.timed(t0)
	if err != nil {
		if clientGone(ctx) {
			gone(ctx, res)
			return
		}
		if e.failOpen {
			e.storeFailed(err)
			e.metrics.Fallback(OnErrorAllow)
			return
		}
		res.StoreErr, res.Allowed, res.Deferrable = err, false, false
		res.Rule, res.DeniedBy, res.DeniedKey, res.Decision = nil, nil, "", sluice.Decision{}
		return
	}
	best := -1
	for j, i := range at {
		d := p.ds[j]
		if n := a.shards[i]; n > 1 {
			unshard(&d, a.rules[i].Limit, n)
		}
		a.ds[i] = d
		if !d.Allowed && (best < 0 || longer(d.RetryAfter, a.ds[best].RetryAfter)) {
			best = i
		}
	}
	if best < 0 {
		res.charged = append(res.charged[:0], p.rs...)
		res.delays = res.delays[:0]
		for j := range p.ds {
			res.delays = append(res.delays, p.ds[j].Delay)
		}
		return
	}
	res.Deferrable = false
	res.Rule, res.DeniedBy, res.Decision, res.DeniedKey = a.rules[best], a.rules[best], a.ds[best], a.keys[best]
}

// NotQueued gives back what AdmitOrDefer charged the other enforcing
// rules for res, a Deferrable request the edge did not queue after all
// (its body too large, the queue full, Redis refusing it): their counts
// are as if it had never come, since nothing served it. Each charge is
// given back at the present instant (sluice.Refunder): never more than
// the key counts, and nothing once it may have lapsed (lapsed). A
// store that cannot give back (down, or without Refund) is counted and
// logged as a store failure: the charge then stays. It runs at most once per res;
// after a request the edge queued, or one AdmitOrDefer charged nothing
// for, it does nothing. It gives back even if ctx has ended (the client
// gone): it keeps only ctx's values, and takes at most refundTimeout, as
// every give-back does.
func (e *Engine) NotQueued(ctx context.Context, res *Result) {
	charged, delays := res.charged, res.delays
	res.charged, res.delays = nil, nil
	if len(charged) == 0 {
		return
	}
	rf, ok := e.store.(sluice.Refunder)
	if !ok {
		e.storeFailed(fmt.Errorf("engine: give back a deferred request's charges: the store (%T): %w", e.store, errors.ErrUnsupported))
		return
	}
	ctx, cancel := refundContext(ctx)
	defer cancel()
	now := e.now()
	for i, r := range charged {
		if lapsed(&r, delays[i], now) {
			continue
		}
		r.Now = now
		if _, err := rf.Refund(ctx, r); err != nil {
			e.storeFailed(fmt.Errorf("engine: give back a deferred request's charge of %q: %w", r.Key, err))
		}
	}
}

// lapsed reports whether the charge r, made at r.Now (its Delay delay),
// may no longer be wholly in the key's count by now, so that giving it
// back could give more than it took: a fixed window's that ended (the
// refund would lower the next window's count), a sliding window's a
// Period old (it would drop the times of requests made since); a leaky
// bucket's place that has left (the queue would move up a place someone
// left in), or a bucket's token that has had time to come back (the
// bucket may have been full since, and the refund would add a token on
// top): after cost × Period / Rate. Such a charge is kept: a client that
// chooses when its request fails (a body trickled in, then cut) would
// otherwise move its allowance into a later window, or bank tokens past
// the burst, at will.
func lapsed(r *sluice.Request, delay time.Duration, now time.Time) bool {
	l := &r.Limit
	if l.Rate <= 0 || l.Period <= 0 {
		return false
	}
	since := now.Sub(r.Now)
	switch r.Algorithm {
	case sluice.FixedWindow:
		p := l.Period.Microseconds()
		return p > 0 && floorDiv(r.Now.UnixMicro(), p) != floorDiv(now.UnixMicro(), p)
	case sluice.SlidingWindowLog, sluice.SlidingWindowCounter:
		return since >= l.Period
	case sluice.TokenBucket, sluice.GCRA:
		return since >= refill(l, r.Cost)
	case sluice.LeakyBucket:
		return since >= delay
	}
	return false
}

// refill is the time cost units of l take to come back: cost × Period /
// Rate, at most a day past the Period (no overflow).
func refill(l *sluice.Limit, cost int64) time.Duration {
	per := l.Period / time.Duration(l.Rate)
	if per <= 0 {
		return 0
	}
	if cost > int64((l.Period+24*time.Hour)/per) {
		return l.Period + 24*time.Hour
	}
	return time.Duration(cost) * per
}

// floorDiv is a / b rounded toward minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Queued charges the shadow rules of ms for a request that Admit refused
// (Result.Deferrable) and the edge has since queued under action defer:
// it will be served, at its replay, so a shadow rule, which measures what
// enforcing it would refuse, is charged by it as by an admitted request,
// once. Admit, the request refused, asked the shadow rules without
// charging them and counted their verdicts; the replay asks only the
// defer rule's limit, so this is the one charge. It counts no verdict,
// and a rule over its limit is charged nothing (as Admit found it would
// not pass), and logged (finish, knowing AdmitOrDefer's request would be
// queued, left that to here). A store failure is counted as one.
func (e *Engine) Queued(ctx context.Context, ms []rules.Match, cost int64) {
	var now time.Time
	for i := range ms {
		r := ms[i].Rule
		if r.Action != rules.Shadow {
			continue
		}
		if now.IsZero() {
			now = e.now()
		}
		req, _ := e.request(r, ms[i].Key, cost, now)
		d, err := e.store.Take(ctx, req)
		if err != nil {
			if !clientGone(ctx) {
				e.storeFailed(err)
			}
			continue
		}
		if !d.Allowed && e.shadowLog.OK(now) { // finish left it to here
			e.log.Info("shadow rule would deny", "rule", r.Name, "key", ms[i].Key, "retry_after", d.RetryAfter, "deferred", true, "suppressed", e.shadowLog.Dropped())
		}
	}
}
