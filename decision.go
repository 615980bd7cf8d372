package sluice

import "time"

// Never is the RetryAfter of a request that no amount of waiting admits:
// its cost is larger than the limit's capacity (Burst for the buckets and
// GCRA, Burst+1 for the leaky bucket, Rate for the windows).
const Never time.Duration = -1

// Decision is the answer for one request. Over the limit is Allowed ==
// false, not an error.
type Decision struct {
	// Allowed reports whether the request was admitted (and counted).
	Allowed bool
	// Limit is the limit's Rate, as sent in X-RateLimit-Limit.
	Limit int64
	// Remaining is how many more requests of cost 1 would be admitted at the
	// same instant.
	Remaining int64
	// RetryAfter is 0 when admitted; otherwise how long until the same
	// request would be admitted if nothing else arrived, or Never. Like
	// ResetAfter, it is told on the request's clock (its Now), even when
	// the key's state was left by a clock ahead of it.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is back at full capacity if
	// nothing else arrives (the window or bucket is "full again").
	ResetAfter time.Duration
	// Delay is how long an admitted request must wait before it proceeds:
	// non-zero only for the LeakyBucket, which shapes traffic.
	Delay time.Duration
}
