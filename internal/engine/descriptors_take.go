package engine

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
)

// uncounted corrects the statuses of the descriptors active after a
// TakeAll that counted nothing (another descriptor was over): the store
// answers what each request alone would leave, net of its own cost and of
// the costs of the same key's allowed requests before it, and none of
// them was charged. An allowed descriptor's Remaining becomes what is
// really left, as a check that counts nothing would read it.
//
// Two answers are left as they are. A decision the store did not ask for
// (the over-limit cache refuses the request from memory and reports the
// others allowed with nothing known: no remaining, no reset; a request
// that was really asked and would have been charged always has a reset
// time). And every decision of a request with a sync or lease descriptor:
// the fleet decorators ask the others without counting (cost 0) when
// their own are denied, so those already say what is left.
func uncounted(a *attempt, ds []Descriptor, active []int, st []DescriptorStatus) {
	for _, i := range active {
		if r := ds[i].Rule; r.Sync != 0 || !r.Lease.IsZero() {
			return
		}
	}
	for j, i := range active {
		d := &st[i].Decision
		if !d.Allowed || d.Remaining == 0 && d.ResetAfter == 0 && d.RetryAfter == 0 {
			continue
		}
		var back int64
		for k := 0; k <= j; k++ {
			if a.ds[k].Allowed && a.rs[k].Key == a.rs[j].Key && a.rs[k].Namespace == a.rs[j].Namespace {
				back = satAdd(back, max(a.rs[k].Cost, 0))
			}
		}
		full := ds[i].Rule.Limit.BurstOrRate()
		if n := int64(a.shards[j]); n > 1 {
			// unshard scaled the shard's figure by n, capped at the
			// whole limit; the shard's own figure goes back up by back.
			if d.Remaining >= full {
				continue
			}
			if x := satAdd(d.Remaining/n, back); x <= full/n {
				d.Remaining = x * n
			} else {
				d.Remaining = full
			}
		} else {
			d.Remaining = satAdd(d.Remaining, back)
		}
		d.Remaining = min(d.Remaining, full)
	}
}

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// takeDescriptors asks the store for the descriptors ds[idx...] in one
// Take or TakeAll (reports: with sluice.Request.Force), leaving their
// decisions in a.ds, unsharded. A sharded report is charged over every
// shard (see spread), its other parts in the same TakeAll.
func (e *Engine) takeDescriptors(ctx context.Context, a *attempt, ds []Descriptor, idx []int, now time.Time, report bool) error {
	a.rs, a.ds, a.shards = a.rs[:0], a.ds[:0], a.shards[:0]
	var rest []sluice.Request // the other parts of spread reports, after a.rs's own
	var owner []int           // for each of rest, its request's index in a.rs
	for j, i := range idx {
		r := ds[i].Rule
		whole := sluice.Request{Key: ds[i].Key, Algorithm: r.Algorithm, Limit: r.Limit, Cost: ds[i].Cost, Now: now, Force: report}
		req, n := e.shardDescriptor(r, whole, now)
		if parts := e.spread(whole, n); parts != nil {
			req = parts[0]
			rest = append(rest, parts[1:]...)
			for range parts[1:] {
				owner = append(owner, j)
			}
		}
		a.rs = append(a.rs, req)
		a.ds = append(a.ds, sluice.Decision{})
		a.shards = append(a.shards, n)
	}
	own := len(a.rs)
	for _, q := range rest {
		a.rs = append(a.rs, q)
		a.ds = append(a.ds, sluice.Decision{})
	}
	if e.realClock {
		a.asked = true // observeDescriptors times the request from now
	} else {
		defer a.timed(time.Now())
	}
	if err := e.take(ctx, a); err != nil {
		return err
	}
	for k, j := range owner {
		fold(&a.ds[j], a.ds[own+k])
	}
	a.rs, a.ds = a.rs[:own], a.ds[:own]
	for j, n := range a.shards {
		if n > 1 {
			unshard(&a.ds[j], ds[idx[j]].Rule.Limit, n)
		}
	}
	return nil
}

// shardDescriptor returns req sent to one of the shards of its key as the
// rule says (shards: N, or shards: auto when this instance finds the key
// hot) and the number of shards (1: none, req as it is). Only rules with
// shards: auto feed a hot-key summary, named as the rule in metrics
// ("envoy/DOMAIN/PATH"), with the request's part of the key. req goes by
// value, through sharded, so that only a sharded request's copy goes to the
// heap: its address, given to Options.Shard, moved every descriptor's
// request there.
func (e *Engine) shardDescriptor(r *descriptors.Rule, req sluice.Request, now time.Time) (sluice.Request, int) {
	if e.shard == nil {
		return req, 1
	}
	switch {
	case r.Shards.N >= 2:
		return e.sharded(req, r.Shards.N)
	case r.Shards.Auto && e.auto != nil && e.hotKeys != nil:
		h := e.hotKeys.Rule(r.FullName())
		key := strings.TrimPrefix(req.Key, r.Head())
		h.Observe(key, req.Cost, now)
		if h.IsHot(key) {
			if n := e.auto(); n >= 2 {
				return e.sharded(req, n)
			}
		}
	}
	return req, 1
}
