package sluice

import (
	"context"
	"time"
)

// Request is one question to a Store: may Key, in Namespace, spend Cost
// under Limit, by Algorithm, at Now?
//
// A Limiter fills every field; code that calls a Store directly (a daemon,
// a decorator) fills them itself.
type Request struct {
	// Namespace keeps the state of different limiters apart on one store:
	// a Store keeps state per Namespace+Key, as if the key were their
	// concatenation (the Redis store stores it so). A Limiter sets it to
	// what it counts (its name, algorithm and limit, see
	// Limiter.Namespace); "" means Key alone, for callers that put a
	// fingerprint of the limit into Key themselves.
	Namespace string
	Key       string
	Algorithm Algorithm
	Limit     Limit
	Cost      int64
	// Now is the instant of the decision, within MinTime … MaxTime
	// (1970 to 2112); stores refuse others with ErrInvalidTime. The
	// Redis store with Options.RedisTime does not read it.
	Now time.Time
	// Force charges Cost even past the limit: a report of work already
	// done, such as the tokens of an LLM response known only after it.
	// The overage is carried as debt, so later requests are refused until
	// it has drained (what debt is per algorithm: Algorithm.Charge). The
	// Decision's Allowed then tells whether the charge fitted under the
	// limit; it is counted either way. In TakeAll a forced request never
	// makes the others fail, but it is counted only with them: when
	// another request is denied, nothing is counted.
	Force bool
}

// Store keeps per-key state and runs the algorithms on it atomically.
// Implementations: memstore (in process) and redisstore (shared by a fleet).
// A Store is safe for concurrent use.
//
// A Store keeps one state per Namespace+Key (see Request.Namespace); the
// sluicetest package checks that, with the rest of the contract.
type Store interface {
	// Take decides one request and, if it is allowed, counts it.
	// The error, if any, means the store could not decide; store failures
	// wrap ErrStoreUnavailable, a negative cost ErrInvalidCost and an
	// invalid limit ErrInvalidLimit.
	Take(ctx context.Context, r Request) (Decision, error)

	// TakeAll decides several requests as one: they are all counted if
	// every one is allowed, and none is counted otherwise, so a request
	// denied by one rule consumes nothing from the others. ds[i] receives
	// what rs[i] alone decides; len(ds) must be len(rs).
	TakeAll(ctx context.Context, rs []Request, ds []Decision) error
}

// KeyTaker is an optional fast path of a Store, for the in-process hot
// path: a Limiter whose store implements it (memstore does) calls TakeKey
// instead of Take for Allow, AllowN and AllowAt under its limit in force.
//
// TakeKey decides exactly as Take(ctx, q) would, where q is *r with Key,
// Cost and Now replaced by key, cost and now, and returns that Decision's
// fields one by one (its Limit is r.Limit.Rate); on an error the other
// results are zero. *r is the Limiter's own Request for its limit in
// force: the store must only read it, during the call, and never change or
// keep it.
//
// It exists for speed alone. Take receives a 104-byte Request and returns
// a 48-byte Decision by value; Go copies both through memory, 16 bytes at
// a time out of places just written 8 bytes at a time, which stalls the
// CPU (no store forwarding) and cost a hot key's decision about a quarter
// of its time. Through TakeKey, the pointer to a Request built once, the
// key, the cost and the six results all travel in registers.
type KeyTaker interface {
	TakeKey(ctx context.Context, r *Request, key string, cost int64, now time.Time) (allowed bool, remaining int64, retryAfter, resetAfter, delay time.Duration, err error)
}

// Resetter is implemented by stores that can forget a key's state (both
// stores in this module do). Reset makes r.Namespace+r.Key new again, as if
// it had never been seen; r.Algorithm and r.Limit say where the state is
// kept, Cost and Now are ignored. Limiter.Reset uses it.
type Resetter interface {
	Reset(ctx context.Context, r Request) error
}

// Refunder is an optional method of a Store, for giving units back: work
// that was counted and then not done, such as a request admitted by some
// rules and then dropped (a queue that refused it), or Envoy's negative
// hits. memstore and redisstore implement it, and the fleet decorators
// over them.
//
// Refund gives back r.Cost units of r.Limit's allowance to
// r.Namespace+r.Key at r.Now, as Algorithm.Refund says per algorithm:
// never more than the key has counted (on a key at rest it changes
// nothing), and units, not a particular request's. It returns the Decision
// a request of cost 0 at r.Now would get right after it (Remaining and
// ResetAfter then tell the state; Allowed is false only while a forced
// charge's debt is past the limit). r.Force is ignored. Errors are as
// Take's: ErrStoreUnavailable when the store could not give back (nothing
// was given back, or it is not known whether it was), ErrInvalidCost for
// a negative cost.
//
// A decorator that has the method but cannot keep the promise over the
// store it wraps gives nothing back and returns an error wrapping
// errors.ErrUnsupported.
type Refunder interface {
	Refund(ctx context.Context, r Request) (Decision, error)
}

// AllAllowed reports whether every decision in ds allowed its request.
func AllAllowed(ds []Decision) bool {
	for i := range ds {
		if !ds[i].Allowed {
			return false
		}
	}
	return true
}

// WithinTaker is an optional method of a Store, for Limiter.WaitN on a
// leaky bucket under a deadline: a Limiter whose store implements it
// (memstore and redisstore do, and the fleet decorators over them) asks and takes in one step, so that no
// other request can take the slot it saw in between, and never takes a
// slot that leaves too late to be waited for.
//
// TakeWithin decides r as Take does, except that a leaky bucket request
// that Take would admit with a Delay over within is not counted: late is
// then true, and d is its refusal (Allowed false, RetryAfter the Delay it
// would have had, Delay 0, Remaining and ResetAfter as without it). For
// the other algorithms, a forced request or a cost of 0, it is Take and
// late is false.
//
// A decorator that has the method but cannot keep the promise over the
// store it wraps (one without WithinTaker) counts nothing and returns an
// error wrapping errors.ErrUnsupported; WaitN then asks and takes in two
// steps, as on a store without the method.
type WithinTaker interface {
	TakeWithin(ctx context.Context, r Request, within time.Duration) (d Decision, late bool, err error)
}
