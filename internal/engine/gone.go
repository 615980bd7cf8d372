package engine

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
)

// Clients that go away. The limiter refused none of them, so no rule
// counts one denied: a request gone before the store answered, or while
// it waited for room under action delay, has no verdict (nothing was
// taken); one admitted and gone while it waited out its slot's Delay
// counts allowed (its counts stay taken, but the slot that has not left,
// given back). Each is counted, under every rule of its request, in
// sluice_clients_gone_total{stage}: decision or held here, upstream by the
// proxy (ClientGone).

// clientGone reports whether ctx was cancelled: the client went away (the
// Redis store refuses a call whose context has ended). A deadline that
// passed (a gRPC client's timeout, shorter than store.redis.timeout) is
// not that: the store was slower than its client allows, a store failure
// the metrics must show.
func clientGone(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}

// gone makes res the result of a request whose client went away before
// the store answered (clientGone): the store did not fail, and on_error
// allow must not send the request on uncounted. It ends as when the
// client leaves a wait.
func gone(ctx context.Context, res *Result) {
	res.Allowed, res.Err, res.StoreErr, res.undecided = false, ctx.Err(), nil, true
	res.goneStage = metrics.GoneDecision
}

// goneHeld makes res, whose wait under action delay its client's leaving
// ended (res.Err set), the result of a request the limiter did not
// refuse: admitted (res.Allowed: it waited out its slot's Delay), its
// rules count it allowed; still waiting for room, none has a verdict.
func goneHeld(res *Result) {
	res.goneStage = metrics.GoneHeld
	res.goneAdmitted = res.Allowed
	res.undecided = !res.Allowed
	res.Allowed = false
	res.DeniedBy, res.DeniedKey = nil, ""
}

// Gone reports whether the request's client went away before Admit,
// AdmitOrDefer, Decide or Check returned, and was counted so in
// sluice_clients_gone_total (Err is then set).
func (r *Result) Gone() bool { return r.goneStage != "" }

// ClientGone counts in sluice_clients_gone_total, once under each rule of
// ms, a request whose client went away at stage (metrics.GoneHeld,
// metrics.GoneUpstream) after its decision was returned: the edge
// answered it 499. One gone before (Result.Gone) is counted already.
func (e *Engine) ClientGone(ms []rules.Match, stage string) {
	for i := 0; i < len(ms); {
		r := ms[i].Rule
		for ; i < len(ms) && ms[i].Rule == r; i++ {
		}
		e.ruleMetrics(r).Gone(stage)
	}
}
