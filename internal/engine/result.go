package engine

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rules"
)

// Result is the outcome of one request.
type Result struct {
	// Allowed reports whether the request may proceed (Admit has already
	// waited any delay).
	Allowed bool
	// Rule is the rule whose figures Decision holds, for the response
	// headers: the denying rule, or the tightest enforcing rule. nil when
	// no enforcing rule applied or the store failed: send no headers.
	Rule *rules.Rule
	// Decision is Rule's decision.
	Decision sluice.Decision
	// DeniedBy is the rule that denied the request (the same as Rule); nil
	// when allowed or when the store failed.
	DeniedBy *rules.Rule
	// DeniedKey is the key of DeniedBy that denied the request, when a
	// decision denied it: for a rule counted under several keys (a key
	// part sent with several values), the first of its keys, in the order
	// of the matches, whose decision denied. The edge queues a deferred
	// request under it.
	DeniedKey string
	// Waited is how long Admit held the request under action delay.
	Waited time.Duration
	// StoreErr is the store's error when it could not decide; then Allowed
	// is the on_error policy's answer.
	StoreErr error
	// Err is the request context's error when it ended during a wait, or
	// (Admit, Decide, Check, Report) when it was cancelled before the
	// store answered: the client went away, and the request is not
	// allowed whatever on_error says.
	Err error
	// Deferrable reports that the request was denied only by rules whose
	// action is defer: the edge may queue it (under DeniedBy) instead.
	Deferrable bool

	at      time.Time     // the instant decide decided at
	shape   time.Duration // the longest Delay among admitted delay-action rules
	retry   time.Duration // when denied only by delay rules: the longest RetryAfter; else -1
	need    time.Duration // the wait retry implies: RetryAfter, plus a leaky bucket's queue
	budget  time.Duration // the least MaxDelay among the delay rules that applied
	delayer *rules.Rule   // the delay rule that set shape

	undecided bool // the client went away before the store decided, or while waiting for room: no rule has a verdict
	// goneStage is where the request was when its client went away
	// (metrics.GoneDecision, GoneHeld); "" while it is there. goneAdmitted:
	// it was admitted, waiting out its slot's Delay (its rules count it
	// allowed).
	goneStage    string
	goneAdmitted bool
	queueing     bool // AdmitOrDefer: the edge queues it if Deferrable (and Queued logs its shadow rules)
	// charged are the requests AdmitOrDefer charged the other enforcing
	// rules for a Deferrable request (chargeOthers), for NotQueued, and
	// delays the Delay of each (a leaky bucket place's).
	charged []sluice.Request
	delays  []time.Duration
}
