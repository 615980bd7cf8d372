package engine

import (
	"context"
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
	// Separate arrays, not fields of one struct, and none retained by a
	// callee (giveBackDescriptors' goroutines copy theirs): escape
	// analysis would otherwise move them to the heap, one allocation per
	// request, negative descriptors or none.
	active, reports, back, t := sortDescriptors(ds, st, idx[:0], ridx[:0], nidx[:0])
	res := DescriptorsResult{Now: now}
	if len(back) > 0 {
		later, cancel := e.refundContext(ctx)
		defer cancel()
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
			e.descriptorsNotTaken(ctx, err, ds, st, reports, &res)
			return res
		}
		quotaOver, _, hard := settleDescriptors(a, ds, st, reports)
		t.quotaOver += quotaOver
		t.hard = t.hard || hard
	}
	if t.hard || t.quotasOver(t.quotaOver) {
		// Denied without asking: nothing may be counted anyway.
		res.OverLimit = true
		e.countDescriptors(ds, st, true)
		return res
	}
	if !e.takeActive(ctx, a, ds, st, active, &t, now, &res) {
		return res
	}
	e.countDescriptors(ds, st, res.OverLimit)
	return res
}

// descriptorTally counts, for one request, its quota_mode descriptors
// (quotas) and those of them over their limit (quotaOver); hard is set when
// a descriptor that is neither in shadow_mode nor in quota_mode is over.
type descriptorTally struct {
	quotas, quotaOver int
	hard              bool
}

// sortDescriptors zeroes each descriptor's status and appends its index in
// ds to what DecideDescriptors does with it: active, to be taken from the
// store all together; reports, with report: true, charged first; back,
// negative, its hits given back before. A descriptor without a rule, or
// unlimited, goes nowhere; one with requests_per_unit 0 is over without
// asking the store (negative: never, and it gives nothing back). t counts
// the quota descriptors and those over already.
func sortDescriptors(ds []Descriptor, st []DescriptorStatus, active, reports, back []int) (_, _, _ []int, t descriptorTally) {
	for i := range ds {
		st[i] = DescriptorStatus{}
		r := ds[i].Rule
		switch {
		case r == nil:
			if ds[i].Quota {
				t.quotas++ // never over, as the reference service counts it
			}
			continue
		case r.Unlimited:
			continue
		case ds[i].Negative:
			if r.RequestsPerUnit > 0 {
				back = append(back, i)
			}
			if ds[i].quota() {
				t.quotas++ // answered OK: never over, as the reference service counts it
			}
			continue
		case r.RequestsPerUnit == 0:
			st[i].Over = true
			switch {
			case ds[i].quota():
				t.quotas++
				if !ds[i].shadow() {
					t.quotaOver++
				}
			case !ds[i].shadow():
				t.hard = true
			}
			continue
		}
		// A quota descriptor in shadow mode is one of the request's quota
		// descriptors that is never over (it answers OK), as in the
		// reference service: while one applies, the quotas do not deny.
		if ds[i].quota() {
			t.quotas++
		}
		if r.Report {
			reports = append(reports, i)
		} else {
			active = append(active, i)
		}
	}
	return active, reports, back, t
}

// quotasOver reports whether over quota descriptors over their limit are
// every quota descriptor of the request (and there is one): the quotas deny.
func (t *descriptorTally) quotasOver(over int) bool { return t.quotas > 0 && over == t.quotas }

// refundContext returns the context of the store calls after the refunds'
// first, and its cancel (a no-op when it is ctx itself). With
// Options.StoreTimeout, the store calls made in turn after the refunds'
// first (a sharded key's, several of one key) and the takes get what is
// left of the first's bound: a store that did not answer fails them at
// once (one that fell back to memory meanwhile decides them there). The
// first calls are bounded by the store itself, so that one that does not
// answer fails as the store's failure, not as the caller's deadline (a
// fallback goes to memory on the one, not on the other).
func (e *Engine) refundContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.storeTimeout > 0 {
		return context.WithTimeout(ctx, e.storeTimeout)
	}
	return ctx, func() {}
}

// takeActive takes ds[active...] from the store in one TakeAll, and again
// without those over their limit that do not deny the request (shadow_mode,
// or quota_mode while another quota descriptor is under) until every one
// left admits it, so that an allowed request is counted by every
// descriptor that admitted it. It sets res.OverLimit when a descriptor
// denies the request (and then nothing was counted: see uncounted). It
// returns false when the store did not decide: then res is final and the
// metrics counted (see descriptorsNotTaken).
func (e *Engine) takeActive(ctx context.Context, a *attempt, ds []Descriptor, st []DescriptorStatus, active []int, t *descriptorTally, now time.Time, res *DescriptorsResult) bool {
	for len(active) > 0 {
		if err := e.takeDescriptors(ctx, a, ds, active, now, false); err != nil {
			e.descriptorsNotTaken(ctx, err, ds, st, active, res)
			return false
		}
		quotaOver, soft, hard := settleDescriptors(a, ds, st, active)
		over := t.quotaOver + quotaOver
		if hard || t.quotasOver(over) {
			res.OverLimit = true // nothing was counted
			uncounted(a, ds, active, st)
			return true
		}
		if soft == 0 {
			return true // every descriptor admitted and counted
		}
		// Take again without the descriptors over their limit that do not
		// deny the request; their statuses stay as decided.
		t.quotaOver = over
		kept := active[:0]
		for j, i := range active {
			if a.ds[j].Allowed {
				kept = append(kept, i)
			}
		}
		active = kept
	}
	return true
}

// settleDescriptors writes the statuses of ds[idx...] from their decisions
// in a.ds (see takeDescriptors) and tallies those over their limit:
// quotaOver counts the quota_mode ones (not in shadow_mode), soft those
// that do not deny the request by themselves (shadow_mode or quota_mode),
// and hard is set when one that is neither is over.
func settleDescriptors(a *attempt, ds []Descriptor, st []DescriptorStatus, idx []int) (quotaOver, soft int, hard bool) {
	for j, i := range idx {
		d := a.ds[j]
		st[i] = DescriptorStatus{Decision: d, Asked: true, Over: !d.Allowed}
		if d.Allowed {
			continue
		}
		switch {
		case ds[i].shadow():
			soft++
		case ds[i].quota():
			quotaOver++
			soft++
		default:
			hard = true
		}
	}
	return quotaOver, soft, hard
}

// descriptorsNotTaken ends a request whose store call for ds[idx...]
// failed with err: as descriptorsGone when the client went away, else as
// on_error says (descriptorsFailed), the statuses of ds[idx...] zeroed
// (the hits were asked for: none is over the limit nor near it) and the
// metrics counted.
func (e *Engine) descriptorsNotTaken(ctx context.Context, err error, ds []Descriptor, st []DescriptorStatus, idx []int, res *DescriptorsResult) {
	if clientGone(ctx) {
		e.descriptorsGone(ctx, ds, st, res)
		return
	}
	e.descriptorsFailed(err, res)
	for _, i := range idx {
		st[i] = DescriptorStatus{}
	}
	e.countDescriptors(ds, st, res.OverLimit)
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
