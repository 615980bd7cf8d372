package engine

import (
	"context"

	"github.com/sluicehq/sluice"
)

// A report (sluice.Request.Force) past the limit is debt: the key's next
// requests are refused until it has drained. On a sharded key that holds
// only if every shard carries its part of the debt: charged to one shard,
// that shard alone would refuse while the others kept admitting. So a
// sharded report of cost 2 or more is charged over every shard, each
// its part of the cost (Options.Spread), and its decision is the parts'
// together.

// spread returns the parts of report req (unsharded) over n shards, or
// nil when it is charged to one shard as any request.
func (e *Engine) spread(req sluice.Request, n int) []sluice.Request {
	if e.spreadf == nil || n < 2 || req.Cost < 2 || !req.Force {
		return nil
	}
	if parts := e.spreadf(req, n); len(parts) >= 2 {
		return parts
	}
	return nil
}

// takeParts charges the parts of a spread report in one call and returns
// their decision together (see fold).
func (e *Engine) takeParts(ctx context.Context, parts []sluice.Request) (sluice.Decision, error) {
	ds := make([]sluice.Decision, len(parts))
	if err := e.store.TakeAll(ctx, parts, ds); err != nil {
		return sluice.Decision{}, err
	}
	for _, x := range ds[1:] {
		fold(&ds[0], x)
	}
	return ds[0], nil
}

// fold adds to d, the decision of one part of a spread report, that of
// another part: the charge fitted only if every part did; the longest
// RetryAfter and ResetAfter; the least Remaining (unshard scales it up).
func fold(d *sluice.Decision, x sluice.Decision) {
	d.Allowed = d.Allowed && x.Allowed
	if longer(x.RetryAfter, d.RetryAfter) {
		d.RetryAfter = x.RetryAfter
	}
	d.ResetAfter = max(d.ResetAfter, x.ResetAfter)
	d.Remaining = min(d.Remaining, x.Remaining)
}
