// Package sluice is rate limiting for APIs: the vocabulary (Limit, Decision,
// Algorithm), the six algorithms as pure state machines, and a keyed Limiter
// over a Store.
//
// # Using it
//
// What an application calls, as with golang.org/x/time/rate:
//
//	store := memstore.New(memstore.Options{})          // or redisstore.New for a fleet
//	lim, err := sluice.NewLimiter(store, sluice.TokenBucket, sluice.PerMinute(100))
//	d, err := lim.Allow(ctx, clientIP)                 // one request for this key, now
//	if err != nil { ... }                              // the store could not decide, or a bug (ErrInvalidCost)
//	if !d.Allowed { ... d.RetryAfter ... }             // over the limit: a result, not an error
//
// The parts an application uses:
//
//   - Limits: PerSecond, PerMinute, PerHour, PerDay, Every, ParseLimit,
//     Limit.WithBurst (for the buckets and GCRA: Algorithm.TakesBurst; a
//     window refuses a burst other than its rate).
//   - Limiter: NewLimiter (WithName, WithClock), Allow, AllowN, AllowAt,
//     Wait, WaitN, AllowLimit for a limit chosen per call (per-plan quotas),
//     Report for a cost known only afterwards, SetLimit, Reset.
//   - Decision: Allowed, Remaining, RetryAfter, ResetAfter, Delay.
//   - Errors: ErrStoreUnavailable (the store could not decide: allow or
//     deny, your policy), ErrInvalidCost, ErrInvalidLimit and
//     ErrInvalidTime (programming errors, such as a WithClock clock never
//     set: never treat them as an outage), ErrNeverAllowed.
//
// Package httplimit wraps this in net/http middleware (several limits in
// one store call, the standard headers, 429 answers), with key functions
// for headers, query parameters, cookies and the client address behind
// trusted proxies (package clientip). Package sluicetest has a settable
// Clock for tests and the conformance suite for stores.
//
// Every Limiter's keys are namespaced by what they count (its name,
// algorithm and limit), so limiters sharing a store never read each other's
// state; see Limiter.
//
// # For store authors
//
// A Store keeps a State per Request.Namespace+Request.Key and runs
// Algorithm.Take (or TakeMicro, the allocation-free form for hot paths) on
// it atomically; Algorithm.UsesLog says which states carry a Log, and
// Limit.Ticks gives the limit in the integer ticks the algorithms count,
// for stores that run the algorithms elsewhere (the Redis store's Lua
// scripts). Resetter is the optional interface behind Limiter.Reset,
// KeyTaker the optional fast path a Limiter uses for its decisions when its
// store has one (memstore does), WithinTaker the one-step take a leaky
// bucket WaitN under a deadline uses (both stores have it, and the fleet
// decorators over them), and Refunder the giving back of the places a
// waiter that leaves no longer needs (Wait, httplimit's middleware). The sluicetest package's Run is the conformance
// suite a Store must pass. Applications need none of these.
//
// # Semantics
//
// Every algorithm is a function of (state, limit, now, cost) that returns the
// next state and a Decision; nothing in this package reads a clock or does
// I/O except the Limiter's time.Now shorthand and Wait. Stores (memstore,
// redisstore) run the same state machines, so every store decides the same
// sequence of (time, key, cost) identically; the sluicetest package proves it.
//
// Being over the limit is a result (Decision.Allowed == false), never an
// error: an error means the store could not decide, or the call was wrong
// (a negative cost, an invalid limit, a time outside MinTime … MaxTime).
//
// Time resolution is one microsecond. Arithmetic is exact integer arithmetic
// on microsecond ticks (coarser ticks for very long limits, see Limit), so
// the Redis store's Lua scripts, whose numbers are IEEE doubles, compute the
// very same results.
//
// This package uses the standard library only.
package sluice
