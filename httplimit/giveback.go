package httplimit

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// refundTimeout bounds the giving back of a leaky bucket place whose
// client went away: the request's context has ended, so the refund runs on
// one of its own, with the request's values.
const refundTimeout = time.Second

// giveBack gives back to a store with sluice.Refunder the leaky bucket
// places of an admitted request whose client went away while it waited
// out its Delay, since after the decision: nobody will leave in them, and
// the requests queued behind move up. A place whose time has come is kept
// (its Delay not over since), and so are the other rules' counts. reqs[i]
// and ds[i] are the request and decision of rule idx[i]. On a store
// without Refunder, or if the refund fails, the places stay taken.
func (m *middleware) giveBack(ctx context.Context, idx []int, reqs []sluice.Request, ds []sluice.Decision, since time.Duration) {
	rf, ok := m.store.(sluice.Refunder)
	if !ok {
		return
	}
	var rctx context.Context
	for i := range reqs {
		q, d := reqs[i], &ds[i]
		if q.Algorithm != sluice.LeakyBucket || q.Cost <= 0 || q.Force || !d.Allowed || d.Delay <= since {
			continue
		}
		if rctx == nil {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
			defer cancel()
		}
		q.Now = m.rules[idx[i]].Limiter.Now()
		_, _ = rf.Refund(rctx, q)
	}
}
