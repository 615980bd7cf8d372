package engine

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice"
)

// refundTimeout bounds the giving back of what a request counted and will
// not use: its context may have ended (the client went away), so the
// refund runs on a context of its own, with the request's values.
const refundTimeout = time.Second

// refundContext is the context a give-back runs on: ctx's values, not its
// end (the client may be gone), bounded by refundTimeout.
func refundContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
}

// giveBack gives back to a store with sluice.Refunder what a's decision
// counted for a request that will not be served, since after that
// decision: everything when all is set (a request refused after it was
// counted consumes nothing), else only the leaky bucket slots that have
// not left yet (a request gone while it waited out its Delay: nobody will
// leave in them, and the next requests take them; a slot whose
// time has come is kept, and so are the other rules' counts). Each leaky
// bucket slot given back is counted in sluice_delay_given_back_total. On
// a store without Refunder everything stays counted, as before stores
// could give back; a refund the store fails stays counted too, and is a
// store failure (sluice_store_errors_total, and a line in the log, under
// the store failures' throttle).
func (e *Engine) giveBack(ctx context.Context, a *attempt, since time.Duration, all bool) {
	rf, ok := e.store.(sluice.Refunder)
	if !ok {
		return
	}
	var rctx context.Context
	var now time.Time
	for i := range a.rs {
		r, d := &a.rs[i], &a.ds[i]
		slot := r.Algorithm == sluice.LeakyBucket && d.Delay > since
		if r.Cost <= 0 || r.Force || !d.Allowed || !all && !slot {
			continue
		}
		if rctx == nil {
			var cancel context.CancelFunc
			rctx, cancel = refundContext(ctx)
			defer cancel()
			now = e.now()
		}
		q := *r
		q.Now = now
		_, err := rf.Refund(rctx, q)
		switch {
		case err == nil && r.Algorithm == sluice.LeakyBucket:
			e.ruleMetrics(a.rules[i]).GivenBack()
		case err != nil && !errors.Is(err, errors.ErrUnsupported):
			e.giveBackFailed(a.rules[i].Name, r, err)
		}
	}
}

// giveBackFailed counts and logs a give-back of r the store could not
// make: the units a request will not use stay counted against its key.
func (e *Engine) giveBackFailed(rule string, r *sluice.Request, err error) {
	e.metrics.StoreError()
	if !e.storeLog.OK(e.now()) {
		return
	}
	e.log.Warn("store could not give back what a request will not use: it stays counted", "rule", rule, "key", r.Key, "cost", r.Cost, "err", err, "suppressed", e.storeLog.Dropped())
}
