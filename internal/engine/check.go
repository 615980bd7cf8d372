package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
)

// Check decides one rule for a store key chosen by the caller, as
// POST /v1/check does: no matching, no waiting. For an enforcing rule it is
// Decide with that one match. A shadow rule counts the request and reports
// its figures but always allows: Decision then has Allowed true, and
// RetryAfter and Delay 0, whatever the rule would have said. A request
// whose context ended before the store answered (the client went away)
// comes back not allowed with Result.Err, whatever on_error says, and is
// no store error.
func (e *Engine) Check(ctx context.Context, r *rules.Rule, key string, cost int64) Result {
	if r.Action != rules.Shadow {
		m := [1]rules.Match{{Rule: r, Key: key}}
		return e.Decide(ctx, m[:], cost)
	}
	t0 := time.Now()
	now := e.now()
	req, n := e.request(r, key, cost, now)
	d, err := e.store.Take(ctx, req)
	if n > 1 {
		unshard(&d, r.Limit, n)
	}
	e.metrics.ObserveDecision(time.Since(t0))
	if err != nil && clientGone(ctx) {
		// The client went away: see clientGone.
		e.ruleMetrics(r).Gone(metrics.GoneDecision)
		return Result{Err: ctx.Err(), goneStage: metrics.GoneDecision}
	}
	if err != nil {
		e.storeFailed(err)
		return Result{Allowed: true, StoreErr: err}
	}
	if d.Allowed {
		e.ruleMetrics(r).Allowed()
	} else {
		e.ruleMetrics(r).ShadowDenied()
	}
	d.Allowed, d.RetryAfter, d.Delay = true, 0, 0 // never refuses, never shapes
	return Result{Allowed: true, Rule: r, Decision: d}
}

// Report charges cost to rule r for a store key chosen by the caller even
// past the limit, as POST /v1/report does (sluice.Request.Force): for a
// cost known only after the response, such as an LLM's tokens. The
// overage is carried as debt, so the key's next requests are refused until
// it has drained. Allowed reports whether the charge fitted under the
// limit; when it did not, Decision.RetryAfter is how long until a request
// of cost 1 is admitted again. A shadow rule is charged the same way and
// always allows. A store failure answers as on_error says, charging
// nothing; a client gone before the store answered ends as in Check.
func (e *Engine) Report(ctx context.Context, r *rules.Rule, key string, cost int64) Result {
	t0 := time.Now()
	req, n := e.request(r, key, cost, e.now())
	req.Force = true
	var d sluice.Decision
	var err error
	if parts := e.spread(sluice.Request{Key: key, Algorithm: r.Algorithm, Limit: r.Limit, Cost: cost, Now: req.Now, Force: true}, n); parts != nil {
		d, err = e.takeParts(ctx, parts)
	} else {
		d, err = e.store.Take(ctx, req)
	}
	if n > 1 {
		unshard(&d, r.Limit, n)
	}
	e.metrics.ObserveDecision(time.Since(t0))
	if err != nil && clientGone(ctx) {
		// The client went away: see clientGone.
		e.ruleMetrics(r).Gone(metrics.GoneDecision)
		return Result{Err: ctx.Err(), goneStage: metrics.GoneDecision}
	}
	if err != nil {
		e.storeFailed(err)
		return Result{Allowed: e.failOpen, StoreErr: err}
	}
	m := e.ruleMetrics(r)
	switch {
	case d.Allowed:
		m.Allowed()
	case r.Action == rules.Shadow:
		m.ShadowDenied()
		d.Allowed, d.RetryAfter = true, 0
	default:
		m.Denied()
	}
	if r.Action == rules.Shadow {
		d.Delay = 0 // a shadow rule never shapes
	}
	return Result{Allowed: d.Allowed, Rule: r, Decision: d}
}

// request is the store request of rule r for key: observed by the rule's
// hot-key summary, and sharded as the rule says. n is the number of shards
// it went to (1: not sharded).
func (e *Engine) request(r *rules.Rule, key string, cost int64, now time.Time) (sluice.Request, int) {
	req := sluice.Request{Key: key, Algorithm: r.Algorithm, Limit: r.Limit, Cost: cost, Now: now}
	h := e.hot[r]
	if h != nil {
		h.Observe(key, cost, now)
	}
	if e.shard == nil {
		return req, 1
	}
	switch {
	case r.Shards.N >= 2:
		return e.sharded(req, r.Shards.N)
	case r.Shards.Auto && e.auto != nil && h != nil && h.IsHot(key):
		if n := e.auto(); n >= 2 {
			return e.sharded(req, n)
		}
	}
	return req, 1
}

// sharded is req sent to one of n shards. Apart from request, so that only
// a sharded request's copy goes to the heap (e.shard takes its address).
//
//go:noinline
func (e *Engine) sharded(req sluice.Request, n int) (sluice.Request, int) {
	n = e.shard(&req, n)
	return req, n
}

// unshard turns the decision of one of n shards into the key's: the rule's
// rate as Limit, Remaining scaled by n (an estimate: the other shards are
// not read) and capped by the burst.
func unshard(d *sluice.Decision, l sluice.Limit, n int) {
	d.Limit = l.Rate
	d.Remaining = min(d.Remaining*int64(n), l.BurstOrRate())
}
