package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
)

// finish counts the final outcome of the enforcing rules, decides the
// shadow rules, logs, and observes the request's store time (once per
// request, whatever its attempts). A request whose client went away is
// counted so (gone.go); its shadow rules are decided only if it was
// admitted.
func (e *Engine) finish(ctx context.Context, a *attempt, res *Result, ms []rules.Match, cost int64) {
	if res.goneStage != "" {
		e.ClientGone(ms, res.goneStage)
	}
	// admitted: as for the enforcing rules, which took their counts, a
	// request admitted and then gone while it waited out its Delay
	// charges its shadow rules, on a context its client's leaving has
	// not ended.
	admitted := res.Allowed || res.goneAdmitted
	if res.goneAdmitted {
		var cancel context.CancelFunc
		ctx, cancel = refundContext(ctx)
		defer cancel()
	}
	if res.StoreErr != nil {
		e.storeFailed(res.StoreErr)
		if e.failOpen {
			e.metrics.Fallback(OnErrorAllow)
		} else {
			e.metrics.Fallback(OnErrorDeny)
		}
	} else if !res.undecided {
		for i := 0; i < len(a.rules); {
			r := a.rules[i]
			// A rule counted under several keys (a key part sent with
			// several values: rules.Set.Match puts them in a row) counts
			// one verdict, allowed only if every key was.
			allowed := true
			for ; i < len(a.rules) && a.rules[i] == r; i++ {
				allowed = allowed && a.ds[i].Allowed
			}
			m := e.ruleMetrics(r)
			// A rule counts its own verdict; in a request denied by another
			// rule it counts allowed although nothing was consumed.
			if allowed && (res.Allowed || res.DeniedBy != r) {
				m.Allowed()
			} else {
				m.Denied()
			}
		}
	}
	var now time.Time
	for i := 0; i < len(ms) && !res.undecided; {
		r := ms[i].Rule
		if r.Action != rules.Shadow {
			i++
			continue
		}
		if now.IsZero() {
			now = e.now()
		}
		verdict := 0 // 0: none (the store failed), 1 allowed, 2 shadow-denied
		for ; i < len(ms) && ms[i].Rule == r; i++ {
			req, n := e.request(r, ms[i].Key, cost, now)
			if !admitted {
				// Denied traffic consumes nothing, a shadow rule's
				// counter included (enforced, the rule would not be
				// charged either): ask without counting, and take the
				// rule's own verdict from what remains, as an enforcing
				// rule counts its own in a request another refused.
				req.Cost = 0
			}
			t0 := time.Now()
			d, err := e.store.Take(ctx, req)
			a.timed(t0)
			if err != nil {
				if !clientGone(ctx) { // else not the store's failure
					e.storeFailed(err)
				}
				continue
			}
			if !admitted {
				// What the shard asked has left, before the key's
				// estimate: the shard is what would decide.
				d.Allowed = d.Allowed && d.Remaining >= cost
			}
			if n > 1 {
				unshard(&d, r.Limit, n)
			}
			if d.Allowed {
				verdict = max(verdict, 1)
				continue
			}
			verdict = 2
			if res.Deferrable && res.queueing {
				continue // the edge queues it: Queued logs, once it is queued
			}
			if e.shadowLog.OK(now) {
				if admitted {
					e.log.Info("shadow rule would deny", "rule", r.Name, "key", ms[i].Key, "retry_after", d.RetryAfter, "suppressed", e.shadowLog.Dropped())
				} else { // asked at cost 0: no wait of its own to tell
					e.log.Info("shadow rule would deny", "rule", r.Name, "key", ms[i].Key, "remaining", d.Remaining, "refused_anyway", true, "suppressed", e.shadowLog.Dropped())
				}
			}
		}
		switch verdict {
		case 1:
			e.ruleMetrics(r).Allowed()
		case 2:
			e.ruleMetrics(r).ShadowDenied()
		}
	}
	if a.asked {
		e.metrics.ObserveDecision(a.took)
	}
}

func (e *Engine) ruleMetrics(r *rules.Rule) *metrics.Rule {
	if m, ok := e.byRule[r]; ok {
		return m
	}
	return e.metrics.Rule(r.Name)
}

func (e *Engine) storeFailed(err error) {
	e.metrics.StoreError()
	if e.storeLog.OK(e.now()) {
		e.log.Warn("store could not decide", "err", err, "on_error_allow", e.failOpen, "suppressed", e.storeLog.Dropped())
	}
}
