package engine

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/metrics"
)

// Descriptor is one descriptor of an Envoy rate limit request, matched:
// the rule that applies (nil for none), the store key it counts under and
// the hits it asks for (0: check without counting).
type Descriptor struct {
	Rule    *descriptors.Rule
	Key     string
	Cost    int64
	Metrics *metrics.EnvoyDescriptor
	// Shadow decides the descriptor as one with shadow_mode whatever its
	// rule says (the service's global shadow mode).
	Shadow bool
	// Quota decides the descriptor as one with quota_mode whatever its
	// rule says (the service's global quota mode). With it, a descriptor
	// without a rule is one of the request's quota descriptors that is
	// never over, as in the reference service.
	Quota bool
	// Negative gives Cost back to the rule's counter instead of taking
	// it (Envoy's is_negative_hits): never more than the counter holds,
	// answered OK whatever the counter says (see giveBackDescriptors).
	Negative bool
}

// shadow reports whether d never denies: its rule's shadow_mode, or the
// service's.
func (d *Descriptor) shadow() bool { return d.Shadow || d.Rule.Shadow }

// quota reports whether d denies only with every quota descriptor of the
// request: its rule's quota_mode, or the service's.
func (d *Descriptor) quota() bool { return d.Quota || (d.Rule != nil && d.Rule.Quota) }

// DescriptorStatus is what one descriptor decided.
type DescriptorStatus struct {
	// Over reports whether the descriptor is over its limit (a shadow_mode
	// descriptor may be over and still let the request through).
	Over bool
	// Decision holds the store's figures; zero when the store was not
	// asked (no rule, unlimited, requests_per_unit 0, store failure). When
	// another descriptor denied the request, an allowed one's Remaining is
	// what is left, since nothing was counted.
	Decision sluice.Decision
	// Asked reports whether Decision came from the store.
	Asked bool
}

// DescriptorsResult is the outcome of one Envoy rate limit request.
type DescriptorsResult struct {
	// OverLimit is the overall answer: some descriptor that is neither in
	// shadow_mode nor in quota_mode is over, or every quota_mode descriptor
	// is over, one in shadow_mode never being over (the reference
	// service's rule).
	OverLimit bool
	// StoreErr is the store's error when it could not decide; OverLimit is
	// then the on_error policy's answer (deny: true).
	StoreErr error
	// Err is the request context's error when it was cancelled before the
	// store answered: the client went away. OverLimit is then true whatever
	// on_error says, and nothing counts as a store error.
	Err error
	// Now is the instant the descriptors were decided at.
	Now time.Time
}

// DecideDescriptors decides the descriptors of one Envoy rate limit request
// and writes each one's status to st (len(st) must be len(ds)).
//
// Denied traffic consumes nothing: every descriptor with a limit goes
// through one Store.TakeAll, so when the request is over the limit no
// counter moves. Descriptors that are over but do not deny the request
// (shadow_mode, or quota_mode while another quota descriptor is under) are
// left out and the others taken again, so that an allowed request is
// counted by every descriptor that admitted it; that second round trip
// happens only then. Unlimited descriptors and descriptors with
// requests_per_unit 0 never reach the store. Negative descriptors give
// their hits back first, all together (those of one key in turn),
// whatever the others decide, and never deny; with Options.StoreTimeout,
// they and the store calls after them share one bound.
func (e *Engine) DecideDescriptors(ctx context.Context, ds []Descriptor, st []DescriptorStatus) DescriptorsResult {
	now := e.now()
	a := getAttempt()
	defer putAttempt(a)
	defer e.observeDescriptors(a, now)
	var idx, ridx, nidx [16]int
	active := idx[:0]   // indexes into ds of the descriptors going to the store
	reports := ridx[:0] // …of those with report: true, charged first
	back := nidx[:0]    // …of the negative ones, given back before
	quotas, quotaOver := 0, 0
	hard := false
	for i := range ds {
		st[i] = DescriptorStatus{}
		r := ds[i].Rule
		switch {
		case r == nil:
			if ds[i].Quota {
				quotas++ // never over, as the reference service counts it
			}
			continue
		case r.Unlimited:
			continue
		case ds[i].Negative:
			if r.RequestsPerUnit > 0 {
				back = append(back, i)
			}
			if ds[i].quota() {
				quotas++ // answered OK: never over, as the reference service counts it
			}
			continue
		case r.RequestsPerUnit == 0:
			st[i].Over = true
			switch {
			case ds[i].quota():
				quotas++
				if !ds[i].shadow() {
					quotaOver++
				}
			case !ds[i].shadow():
				hard = true
			}
			continue
		}
		// A quota descriptor in shadow mode is one of the request's quota
		// descriptors that is never over (it answers OK), as in the
		// reference service: while one applies, the quotas do not deny.
		if ds[i].quota() {
			quotas++
		}
		if r.Report {
			reports = append(reports, i)
		} else {
			active = append(active, i)
		}
	}
	res := DescriptorsResult{Now: now}
	if len(back) > 0 {
		later := ctx
		if e.storeTimeout > 0 {
			// The store calls made in turn after the refunds' first (a
			// sharded key's, several of one key) and the takes get what
			// is left of the first's bound: a store that did not answer
			// fails them at once (one that fell back to memory meanwhile
			// decides them there). The first calls are bounded by the
			// store itself, so that one that does not answer fails as
			// the store's failure, not as the caller's deadline (a
			// fallback goes to memory on the one, not on the other).
			var cancel context.CancelFunc
			later, cancel = context.WithTimeout(ctx, e.storeTimeout)
			defer cancel()
		}
		if !e.giveBackDescriptors(ctx, later, a, ds, st, back, now) {
			e.descriptorsGone(ctx, ds, st, &res)
			return res
		}
		ctx = later
	}
	if len(reports) > 0 {
		// Reports are charged whatever the other descriptors decide, even
		// past their limit (the overage is debt); one that is over (in
		// debt) denies the request as any other descriptor would.
		if err := e.takeDescriptors(ctx, a, ds, reports, now, true); err != nil {
			if clientGone(ctx) {
				e.descriptorsGone(ctx, ds, st, &res)
				return res
			}
			e.descriptorsFailed(err, &res)
			e.countDescriptors(ds, st, res.OverLimit)
			return res
		}
		for j, i := range reports {
			d := a.ds[j]
			st[i] = DescriptorStatus{Decision: d, Asked: true, Over: !d.Allowed}
			switch {
			case d.Allowed || ds[i].shadow():
			case ds[i].quota():
				quotaOver++
			default:
				hard = true
			}
		}
	}
	if hard || (quotas > 0 && quotaOver == quotas) {
		// Denied without asking: nothing may be counted anyway.
		res.OverLimit = true
		e.countDescriptors(ds, st, true)
		return res
	}
	for len(active) > 0 {
		if err := e.takeDescriptors(ctx, a, ds, active, now, false); err != nil {
			if clientGone(ctx) {
				e.descriptorsGone(ctx, ds, st, &res)
				return res
			}
			e.descriptorsFailed(err, &res)
			for _, i := range active {
				st[i] = DescriptorStatus{}
			}
			// The hits were asked for, as when a report's call fails
			// above: none is over the limit nor near it.
			e.countDescriptors(ds, st, res.OverLimit)
			return res
		}
		over := quotaOver
		soft := 0
		for j, i := range active {
			d := a.ds[j]
			st[i] = DescriptorStatus{Decision: d, Asked: true, Over: !d.Allowed}
			if d.Allowed {
				continue
			}
			switch {
			case ds[i].shadow():
				soft++
			case ds[i].quota():
				over++
				soft++
			default:
				hard = true
			}
		}
		if hard || (quotas > 0 && over == quotas) {
			res.OverLimit = true // nothing was counted
			uncounted(a, ds, active, st)
			break
		}
		if soft == 0 {
			break // every descriptor admitted and counted
		}
		// Take again without the descriptors over their limit that do not
		// deny the request; their statuses stay as decided.
		quotaOver = over
		kept := active[:0]
		for j, i := range active {
			if a.ds[j].Allowed {
				kept = append(kept, i)
			}
		}
		active = kept
	}
	e.countDescriptors(ds, st, res.OverLimit)
	return res
}

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
		req := sluice.Request{Key: ds[i].Key, Algorithm: r.Algorithm, Limit: r.Limit, Cost: ds[i].Cost, Now: now, Force: report}
		whole := req
		n := e.shardDescriptor(r, &req, now)
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

// shardDescriptor sends req to one of the shards of its key as the rule
// says (shards: N, or shards: auto when this instance finds the key hot)
// and returns the number of shards (1: none). Only rules with shards: auto
// feed a hot-key summary, named as the rule in metrics
// ("envoy/DOMAIN/PATH"), with the request's part of the key.
func (e *Engine) shardDescriptor(r *descriptors.Rule, req *sluice.Request, now time.Time) int {
	if e.shard == nil {
		return 1
	}
	switch {
	case r.Shards.N >= 2:
		return e.shard(req, r.Shards.N)
	case r.Shards.Auto && e.auto != nil && e.hotKeys != nil:
		h := e.hotKeys.Rule(r.FullName())
		key := strings.TrimPrefix(req.Key, r.Head())
		h.Observe(key, req.Cost, now)
		if h.IsHot(key) {
			if n := e.auto(); n >= 2 {
				return e.shard(req, n)
			}
		}
	}
	return 1
}

// descriptorsFailed answers a store failure as on_error says.
func (e *Engine) descriptorsFailed(err error, res *DescriptorsResult) {
	e.storeFailed(err)
	res.StoreErr = err
	res.OverLimit = !e.failOpen
	if e.failOpen {
		e.metrics.Fallback(OnErrorAllow)
	} else {
		e.metrics.Fallback(OnErrorDeny)
	}
}

// descriptorsGone ends the request of a client that went away before the
// store answered (clientGone): a call refused so is no store failure, and
// the request ends over the limit with res.Err, as the proxy's does. The
// limiter refused none of it and decided nothing the client will read, so
// the Envoy counters take only what moved a counter before it left (the
// hits of a report charged, or given back); it is counted once under each
// rule of its descriptors (envoy/DOMAIN/PATH) in
// sluice_clients_gone_total{stage="decision"}. The Envoy service never
// holds a request, so no stage is held.
func (e *Engine) descriptorsGone(ctx context.Context, ds []Descriptor, st []DescriptorStatus, res *DescriptorsResult) {
	res.Err, res.OverLimit = ctx.Err(), true
	for i := range ds {
		r := ds[i].Rule
		if r == nil {
			continue
		}
		if st[i].Asked && (ds[i].Negative || r.Report) {
			e.countDescriptor(&ds[i], &st[i], false)
		}
		name := r.FullName()
		seen := false
		for j := range i {
			if ds[j].Rule != nil && ds[j].Rule.FullName() == name {
				seen = true
				break
			}
		}
		if !seen {
			e.metrics.ClientGone(name, metrics.GoneDecision)
		}
	}
}

// observeDescriptors observes, once per request, the time to decide it:
// from now, read at its start, on the real clock (no clock reading per
// round trip); else the store calls' time, summed. A request whose
// descriptors asked nothing of the store is not observed.
func (e *Engine) observeDescriptors(a *attempt, now time.Time) {
	switch {
	case !a.asked:
	case e.realClock:
		e.metrics.ObserveDecision(time.Since(now))
	default:
		e.metrics.ObserveDecision(a.took)
	}
}

// countDescriptors records each descriptor's hits in the metrics; denied
// tells that the request was refused, and so that no descriptor but a
// report (charged whatever the others say) counted its hits: those are
// no admitted hits, near the limit or not.
func (e *Engine) countDescriptors(ds []Descriptor, st []DescriptorStatus, denied bool) {
	for i := range ds {
		e.countDescriptor(&ds[i], &st[i], denied)
	}
}

// countDescriptor records the hits of d, whose status is s, as
// countDescriptors does.
func (e *Engine) countDescriptor(d *Descriptor, s *DescriptorStatus, denied bool) {
	r := d.Rule
	if r == nil || d.Metrics == nil {
		return
	}
	if d.Negative {
		d.Metrics.GaveBack(max(d.Cost, 0))
		return
	}
	var near int64
	if s.Asked && !s.Over && r.RequestsPerUnit > 0 && (!denied || r.Report) {
		// The admitted hits that landed in the last 20% of the limit
		// (the reference service's near_limit: the count after the
		// request above floor(0.8 × limit), less what was already).
		limit := int64(r.RequestsPerUnit)
		after := limit - s.Decision.Remaining
		threshold := limit * 8 / 10
		if after > threshold {
			near = min(after-max(threshold, after-d.Cost), d.Cost)
		}
	}
	d.Metrics.Count(max(d.Cost, 0), s.Over, d.shadow(), near)
}
