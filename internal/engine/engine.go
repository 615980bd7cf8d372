// Package engine is the decision core shared by every edge of the daemon
// (the reverse proxy, POST /v1/check, /v1/forward-auth): given the rules
// that match a request, it asks the store, applies the rules' actions and
// the store.on_error policy, counts the outcome in the metrics, and returns
// a Result the edge turns into an answer.
//
// Semantics, for the matches of one request:
//
//   - Every matching rule applies. The enforcing rules (actions reject,
//     delay, defer) are decided together with one Store.TakeAll: the request
//     passes only if all of them allow it, and a request denied by one rule
//     consumes nothing from the others.
//   - Shadow rules are decided after, each on its own with Store.Take, and
//     never block: each counts what it would have counted as the only rule
//     (whatever the enforcing rules said), and a would-be denial is counted
//     as shadow_denied and logged. Deciding them apart from the enforcing
//     ones keeps a shadow rule from changing what the real rules count.
//     They add no response headers: clients see only limits in force.
//   - The response headers carry the tightest enforcing rule's figures: the
//     denying rule's (the longest RetryAfter if several deny), else the rule
//     with the lowest Remaining, ties going to the longest ResetAfter.
//   - Action delay (Admit only): a request over the limit waits for a slot
//     for up to the rule's MaxDelay (the least of them if several delay
//     rules apply). With the leaky bucket the admitted decision carries the
//     Delay that spaces requests evenly; Admit waits it out (a real shaper).
//     With other algorithms a denied request waits RetryAfter and asks again
//     while the total wait stays within MaxDelay (for a leaky bucket whose
//     queue is full, the wait for room for the request's places plus the
//     wait for its first place to leave).
//     Otherwise it is denied
//     (429). Waiting ends early, denied, when the request's context ends;
//     a request that was waiting out a leaky bucket's Delay gives its
//     place in the queue back, if it has not left, to a store with
//     sluice.Refunder (giveBack), and keeps its other rules' counts; one
//     waiting for a slot has taken nothing (TestAdmitLeftWhileWaiting). A
//     request whose leaky bucket slot would leave later than MaxDelay is
//     denied having taken nothing (when the queue, burst × period / rate,
//     is longer than MaxDelay, the bucket is first asked at cost 0 when its
//     queue's last request leaves: see overQueue; its other rules are then
//     neither asked nor counted in the metrics; a request of the key that
//     took the slot it was told of between the question and the take
//     leaves it one past MaxDelay, counted: it is denied, and gives back
//     all it took to a store with sluice.Refunder). Under action reject, a
//     leaky bucket admits immediately (it polices rather than shapes).
//   - Action defer is decided as reject; when every rule that denied is a
//     defer rule, Result.Deferrable is set and the reverse proxy queues the
//     request (internal/deferq) instead of refusing it. AdmitOrDefer,
//     which it calls, first charges such a request's other enforcing
//     rules, all or nothing: it stays Deferrable only if they all allow it
//     (the defer rule only shifts it in time); their charge is kept if the
//     edge then cannot queue it (the Store has no refund).
//   - Shards (a Redis store): a rule with shards: N sends each decision to
//     one of N shards of its key, each holding its share of the limit
//     (Options.Shard); with shards: auto, only keys the rule's hot-key
//     summary finds hot are sharded, over Options.AutoShards shards. The
//     Decision is the shard's, with Limit the rule's rate and Remaining the
//     shard's times N (an estimate). A report of cost 2 or more is charged
//     over every shard (Options.Spread), so its debt holds the whole key.
//   - Hot keys: every decision of a rule is observed by the rule's summary
//     in Options.HotKeys (GET /v1/hotkeys).
//   - When the store cannot decide, on_error "allow" lets the request pass
//     (counted in sluice_store_errors_total and
//     sluice_store_fallback_total{policy="allow"}); "deny" denies it, and the
//     edges answer 503. A store call refused because the request's context
//     was cancelled (the client went away) is no store failure: Admit,
//     Decide, Check, Report and DecideDescriptors end the request with
//     Err, as when the client leaves a wait. A deadline that passed first
//     is a store failure (the store was slower than its client allows).
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ctxtime"
	"github.com/sluicehq/sluice/internal/hotkeys"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
)

// The store.on_error policies the Engine applies.
const (
	OnErrorAllow = "allow"
	OnErrorDeny  = "deny"
	// OnErrorLocal is store.on_error: local. The fallback to a local
	// budget belongs in the store the Engine is given (one that answers
	// from memory while Redis is down); an error that still reaches the
	// Engine lets the request through, as allow does.
	OnErrorLocal = "local"
)

// Options configures an Engine. Store is required.
type Options struct {
	// Store keeps the counters.
	Store sluice.Store
	// Rules are the rules in force; nil means none. The Engine never
	// changes them.
	Rules *rules.Set
	// OnError is what happens when the store cannot decide: "allow" (the
	// default, also for "") or "deny"; "local" acts as "allow" here (see
	// OnErrorLocal).
	OnError string
	// Metrics records decisions; nil records nothing.
	Metrics *metrics.Metrics
	// Logger receives store failures and shadow denials (each at most once
	// a second); nil discards.
	Logger *slog.Logger
	// Now is the clock of the decisions; nil means time.Now. Admit's waits
	// use real timers, so tests of waiting run in a testing/synctest bubble
	// with the default clock.
	Now func() time.Time
	// HotKeys, if set, observes every decision of every rule (by name),
	// whatever its outcome: one whose client went away before the store
	// answered counts too (it asked for the key's counter).
	HotKeys *hotkeys.Set
	// Shard, if set, rewrites a request to one of n shards of its key and
	// returns the number of shards used (redisstore.Store.Shard); rules
	// with shards are not sharded without it.
	Shard func(r *sluice.Request, n int) int
	// Spread, if set, splits a request over all n shards of its key, each
	// with its share of the limit and of the cost
	// (redisstore.Store.Spread): a sharded report is charged so, as debt
	// on the whole key. Without it a report goes to one shard.
	Spread func(r sluice.Request, n int) []sluice.Request
	// Shards, if set, returns r sent to each of the n shards of its key,
	// in shard order, each with its share of the limit (nil when the key
	// is not sharded; redisstore.Store.Shards): a sharded refund (Envoy's
	// negative hits) first asks every shard what it has used, so that it
	// gives back as much as the shards together count. Without it the
	// refund goes to one shard (or Spread's parts), which may give back
	// less than that.
	Shards func(r sluice.Request, n int) []sluice.Request
	// AutoShards returns the number of shards of a hot key under
	// shards: auto (the Cluster's masters); nil or below 2, shards: auto
	// shards nothing.
	AutoShards func() int
	// StoreTimeout is the store's own bound on one call
	// (store.redis.timeout); 0 means none is known. An Envoy rate limit
	// request (DecideDescriptors) gives its refunds back together, so
	// that the store bounds them by one timeout; with StoreTimeout, the
	// refunds made in turn (several of one key, a sharded key's calls)
	// share that timeout from the request's start, and its takes get
	// what is left of it, so that a store that does not answer holds the
	// request about one timeout, however many descriptors it has
	// (without, each call made in turn and the takes are bounded by a
	// timeout of their own).
	StoreTimeout time.Duration
}

// Engine decides requests against a rule set and a store. It is immutable
// and safe for concurrent use; on a reload, build a new Engine over the same
// store (counters of unchanged rules carry over, since store keys carry the
// rule's fingerprint) and swap it in atomically.
type Engine struct {
	store    sluice.Store
	rules    *rules.Set
	failOpen bool
	metrics  *metrics.Metrics
	byRule   map[*rules.Rule]*metrics.Rule
	hot      map[*rules.Rule]*hotkeys.Rule
	hotKeys  *hotkeys.Set // for the summaries of descriptors with shards: auto
	shard    func(r *sluice.Request, n int) int
	spreadf  func(r sluice.Request, n int) []sluice.Request
	shards   func(r sluice.Request, n int) []sluice.Request
	auto     func() int
	log      *slog.Logger
	now      func() time.Time

	storeLog, shadowLog logthrottle.Throttle
	realClock           bool // now is time.Now: its readings time the store calls too
	// storeTimeout bounds the store calls of one DecideDescriptors
	// together (Options.StoreTimeout); 0: each call by the store alone.
	storeTimeout time.Duration
}

// New returns an Engine for o.
func New(o Options) (*Engine, error) {
	if o.Store == nil {
		return nil, fmt.Errorf("engine: nil store")
	}
	e := &Engine{store: o.Store, rules: o.Rules, metrics: o.Metrics, log: o.Logger, now: o.Now, shard: o.Shard, spreadf: o.Spread, shards: o.Shards, auto: o.AutoShards, storeTimeout: o.StoreTimeout}
	switch o.OnError {
	case "", OnErrorAllow, OnErrorLocal:
		e.failOpen = true
	case OnErrorDeny:
	default:
		return nil, fmt.Errorf("engine: on_error %q: want %q, %q or %q", o.OnError, OnErrorAllow, OnErrorDeny, OnErrorLocal)
	}
	if e.rules == nil {
		e.rules = &rules.Set{}
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
		e.realClock = true
	}
	e.byRule = make(map[*rules.Rule]*metrics.Rule, len(e.rules.Rules))
	for _, r := range e.rules.Rules {
		e.byRule[r] = e.metrics.Rule(r.Name)
	}
	e.hotKeys = o.HotKeys
	if o.HotKeys != nil {
		e.hot = make(map[*rules.Rule]*hotkeys.Rule, len(e.rules.Rules))
		for _, r := range e.rules.Rules {
			e.hot[r] = o.HotKeys.Rule(r.Name)
		}
	}
	return e, nil
}

// Rules returns the rules in force.
func (e *Engine) Rules() *rules.Set { return e.rules }

// Store returns the store the Engine decides on.
func (e *Engine) Store() sluice.Store { return e.store }

// FailOpen reports whether the Engine lets requests pass when the store
// cannot decide (on_error allow).
func (e *Engine) FailOpen() bool { return e.failOpen }

// Match appends to dst the rules in force that apply to req, with their
// keys (rules.Set.Match). A *rules.AmbiguousKeyError is counted in the
// metrics; the caller refuses req with WriteMatchError.
func (e *Engine) Match(req *http.Request, clientIP netip.Addr, dst []rules.Match) ([]rules.Match, error) {
	ms, err := e.rules.Match(req, clientIP, dst)
	if err != nil {
		e.countMatchError(err)
	}
	return ms, err
}

// countMatchError counts err of Match in the metrics; apart, so that the
// errors.As target escapes only when Match failed.
func (e *Engine) countMatchError(err error) {
	var ae *rules.AmbiguousKeyError
	if errors.As(err, &ae) {
		e.byRule[ae.Rule].Ambiguous()
	}
}

// Decide decides the request once, at the Engine's clock, without waiting:
// an admitted leaky bucket request reports its Delay in Decision.Delay but
// the caller is not held (Check does the same for one named rule).
func (e *Engine) Decide(ctx context.Context, ms []rules.Match, cost int64) Result {
	a := getAttempt()
	defer putAttempt(a)
	res := e.decide(ctx, a, ms, cost)
	if res.StoreErr != nil && clientGone(ctx) {
		gone(ctx, &res) // as in Admit
	}
	e.finish(ctx, a, &res, ms, cost)
	return res
}

// Admit decides the request and applies action delay: it returns when the
// request may proceed (Allowed), after waiting for a slot and any shaping
// Delay, or when it is denied. The reverse proxy and forward-auth use it.
func (e *Engine) Admit(ctx context.Context, ms []rules.Match, cost int64) Result {
	return e.admit(ctx, ms, cost, false)
}

func (e *Engine) admit(ctx context.Context, ms []rules.Match, cost int64, deferring bool) Result {
	a := getAttempt()
	defer putAttempt(a)
	var start time.Time     // the first decision's instant: no clock reading of its own
	var slept time.Duration // what the timers waited: the floor of elapsed, even on a stopped clock
	for first := true; ; first = false {
		var waited time.Duration
		if !first {
			waited = max(e.now().Sub(start), slept)
		}
		res, refused := e.overQueue(ctx, a, ms, cost, waited)
		if !refused {
			res = e.decide(ctx, a, ms, cost)
		}
		if first {
			start = res.at
		}
		if res.StoreErr != nil && clientGone(ctx) {
			gone(ctx, &res)
			if !first {
				res.goneStage = metrics.GoneHeld // it had waited for room
			}
			res.Waited = max(e.now().Sub(start), slept)
			e.finish(ctx, a, &res, ms, cost)
			return res
		}
		if !refused && res.Deferrable && deferring {
			e.chargeOthers(ctx, a, &res)
			if !first && res.goneStage != "" {
				res.goneStage = metrics.GoneHeld
			}
			res.queueing = true
			res.Waited = max(e.now().Sub(start), slept)
			e.finish(ctx, a, &res, ms, cost)
			return res
		}
		if refused || res.StoreErr != nil || res.budget < 0 {
			e.finish(ctx, a, &res, ms, cost)
			return res
		}
		elapsed := max(e.now().Sub(start), slept)
		var wait time.Duration
		switch {
		case res.Allowed && res.shape > 0:
			// The slot leaves shape after the decision, however long
			// its answer took to come back (a round trip to Redis): that
			// time is part of the wait, not added to it.
			leaves := max(res.at.Sub(start), slept) + res.shape
			if leaves > res.budget {
				// The slot is taken but lies beyond max_delay: a
				// request of the same key took its place between
				// overQueue's question and this take (or the queue is
				// sharded, which overQueue does not ask). Refused, it
				// gives back all it took.
				e.giveBack(ctx, a, e.now().Sub(res.at), true)
				res.Allowed = false
				res.Rule, res.DeniedBy = res.delayer, res.delayer
				res.Decision = a.decisionOf(res.delayer)
				res.Decision.Allowed = false
				res.Decision.RetryAfter = res.shape
				res.Waited = elapsed
				e.finish(ctx, a, &res, ms, cost)
				return res
			}
			wait = max(0, leaves-elapsed)
		case res.Allowed:
			res.Waited = elapsed
			e.metrics.ObserveDelay(elapsed) // 0 too: the histogram is of every admission's wait
			e.finish(ctx, a, &res, ms, cost)
			return res
		case res.retry >= 0 && elapsed+res.need <= res.budget:
			wait = max(res.retry, time.Microsecond)
		default:
			res.Waited = elapsed
			e.finish(ctx, a, &res, ms, cost)
			return res
		}
		if err := ctxtime.Sleep(ctx, wait); err != nil {
			if res.Allowed {
				// Gone while waiting out its slot's Delay.
				e.giveBack(ctx, a, e.now().Sub(res.at), false)
			}
			res.Err = err
			res.Waited = max(e.now().Sub(start), slept)
			if clientGone(ctx) {
				goneHeld(&res)
			} else {
				// Its deadline passed first: the wait was longer than
				// the request allows, a refusal by its delay rule.
				res.Allowed = false
				if res.DeniedBy == nil {
					res.DeniedBy, res.Rule = res.delayer, res.delayer
				}
			}
			e.finish(ctx, a, &res, ms, cost)
			return res
		}
		slept = elapsed + wait
		if res.Allowed { // waited out the shaping delay
			res.Waited = max(e.now().Sub(start), slept)
			res.Decision.Delay = 0
			e.metrics.ObserveDelay(res.Waited)
			e.finish(ctx, a, &res, ms, cost)
			return res
		}
	}
}

// decide runs the enforcing rules of ms through one TakeAll and fills a.
func (e *Engine) decide(ctx context.Context, a *attempt, ms []rules.Match, cost int64) Result {
	now := e.now()
	res := Result{retry: -1, budget: -1, at: now}
	a.reset()
	for i := range ms {
		r := ms[i].Rule
		if r.Action == rules.Shadow {
			continue
		}
		if r.Action == rules.Delay && (res.budget < 0 || r.MaxDelay < res.budget) {
			res.budget = r.MaxDelay
		}
		var n int
		a.rs = append(a.rs, sluice.Request{})
		a.rs[len(a.rs)-1], n = e.request(r, ms[i].Key, cost, now)
		a.rules = append(a.rules, r)
		a.keys = append(a.keys, ms[i].Key)
		a.shards = append(a.shards, n)
	}
	if len(a.rs) == 0 {
		res.Allowed = true
		return res
	}
	if cap(a.ds) < len(a.rs) {
		a.ds = make([]sluice.Decision, len(a.rs))
	} else {
		a.ds = a.ds[:len(a.rs)]
		clear(a.ds)
	}
	t0 := now
	if !e.realClock {
		t0 = time.Now()
	}
	err := e.take(ctx, a)
	a.timed(t0)
	if err != nil {
		res.StoreErr = err
		res.Allowed = e.failOpen
		return res
	}
	for i, n := range a.shards {
		if n > 1 {
			unshard(&a.ds[i], a.rules[i].Limit, n)
		}
	}
	allowed := sluice.AllAllowed(a.ds)
	res.Allowed = allowed
	res.Deferrable = !allowed
	best := -1
	onlyDelay := true
	for i := range a.ds {
		d, r := &a.ds[i], a.rules[i]
		if allowed {
			if r.Action == rules.Delay && d.Delay > res.shape {
				res.shape, res.delayer = d.Delay, r
			}
			if best < 0 || d.Remaining < a.ds[best].Remaining ||
				d.Remaining == a.ds[best].Remaining && d.ResetAfter > a.ds[best].ResetAfter {
				best = i
			}
			continue
		}
		if d.Allowed {
			continue
		}
		if r.Action != rules.Defer {
			res.Deferrable = false
		}
		if r.Action != rules.Delay || d.RetryAfter < 0 {
			onlyDelay = false
		} else {
			res.retry = max(res.retry, d.RetryAfter)
			need := d.RetryAfter
			if r.Algorithm == sluice.LeakyBucket {
				// Once the queue has room for its places, the request
				// still waits for the last of them to leave, at the
				// queue's end: burst spacings.
				need += time.Duration(int64(r.Limit.Period) / r.Limit.Rate * r.Limit.BurstOrRate())
			}
			res.need = max(res.need, need)
		}
		if best < 0 || longer(d.RetryAfter, a.ds[best].RetryAfter) {
			best = i
		}
	}
	if !onlyDelay {
		res.retry = -1
	}
	if allowed && res.delayer == nil {
		for _, r := range a.rules {
			if r.Action == rules.Delay {
				res.delayer = r
				break
			}
		}
	}
	res.Rule, res.Decision = a.rules[best], a.ds[best]
	if !allowed {
		res.DeniedBy = res.Rule
		for i := range a.ds {
			if a.rules[i] == res.DeniedBy && !a.ds[i].Allowed {
				res.DeniedKey = a.keys[i]
				break
			}
		}
	}
	return res
}

// longer reports whether retry-after a is longer than b, Never being the
// longest.
func longer(a, b time.Duration) bool {
	if b < 0 {
		return false
	}
	return a < 0 || a > b
}
