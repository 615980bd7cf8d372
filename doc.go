// Package sluice is rate limiting for APIs: the vocabulary (Limit, Decision,
// Algorithm), the six algorithms as pure state machines, and a keyed Limiter
// over a Store.
//
// Every algorithm is a function of (state, limit, now, cost) that returns the
// next state and a Decision; nothing in this package reads a clock or does
// I/O except the Limiter's time.Now shorthand and Wait. Stores (memstore,
// redisstore) run the same state machines, so every store decides the same
// sequence of (time, key, cost) identically; the sluicetest package proves it.
//
// Being over the limit is a result (Decision.Allowed == false), never an
// error: an error means the store could not decide.
//
// Time resolution is one microsecond. Arithmetic is exact integer arithmetic
// on microsecond ticks (coarser ticks for very long limits, see Limit), so
// the Redis store's Lua scripts, whose numbers are IEEE doubles, compute the
// very same results.
//
// This package uses the standard library only.
package sluice
