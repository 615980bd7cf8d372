package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
)

// attempt holds the requests and decisions of one TakeAll, pooled.
type attempt struct {
	rs     []sluice.Request
	ds     []sluice.Decision
	rules  []*rules.Rule
	keys   []string // per request: its match's key (before sharding)
	shards []int    // per request: the shards it was split over (1: none)

	// took sums the store calls of one request (every attempt of Admit,
	// its queue questions and its shadow rules' takes), which finish
	// observes once in sluice_decision_duration_seconds; asked reports
	// that there was one. Not cleared by reset, which runs per attempt.
	took  time.Duration
	asked bool
}

var attempts = sync.Pool{New: func() any {
	return &attempt{rs: make([]sluice.Request, 0, 8), ds: make([]sluice.Decision, 0, 8), rules: make([]*rules.Rule, 0, 8), keys: make([]string, 0, 8), shards: make([]int, 0, 8)}
}}

func getAttempt() *attempt { return attempts.Get().(*attempt) }

func putAttempt(a *attempt) {
	if cap(a.rs) > 64 {
		return
	}
	a.reset()
	a.took, a.asked = 0, false
	attempts.Put(a)
}

func (a *attempt) reset() {
	clear(a.rs)
	clear(a.rules)
	clear(a.keys)
	a.rs, a.ds, a.rules, a.keys, a.shards = a.rs[:0], a.ds[:0], a.rules[:0], a.keys[:0], a.shards[:0]
}

// timed adds the store call that began at t0 to the request's time.
func (a *attempt) timed(t0 time.Time) {
	a.took += time.Since(t0)
	a.asked = true
}

func (a *attempt) decisionOf(r *rules.Rule) sluice.Decision {
	for i := range a.rules {
		if a.rules[i] == r {
			return a.ds[i]
		}
	}
	return sluice.Decision{}
}

// take decides a's requests in the store, all or nothing. One request
// (every /v1/check, most proxied requests, one Envoy counter) is a Take:
// the same decision, and the stores' fastest path (the Redis store's flat
// script).
func (e *Engine) take(ctx context.Context, a *attempt) error {
	if len(a.rs) == 1 {
		var err error
		a.ds[0], err = e.store.Take(ctx, a.rs[0])
		return err
	}
	return e.store.TakeAll(ctx, a.rs, a.ds)
}
