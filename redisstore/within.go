package redisstore

import (
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

var _ sluice.WithinTaker = (*Store)(nil)

// noWithin is takeFlat's within when there is no bound.
const noWithin = math.MaxInt64

// TakeWithin is Take, except that a leaky bucket request Take would admit
// with a Delay over within is not counted (sluice.WithinTaker): the script
// that decides it queues it only if it leaves in time, so the check and
// the take are one atomic step in Redis, whichever instance asks.
func (s *Store) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if r.Algorithm != sluice.LeakyBucket || r.Force || r.Cost <= 0 || s.flat[r.Algorithm] == nil ||
		!s.opts.RedisTime && sluice.CheckTime(r.Now) != nil {
		// Not bounded, or refused with an error by Take, counting nothing.
		d, err := s.Take(ctx, r)
		return d, false, err
	}
	t, err := r.Limit.Ticks()
	if err != nil {
		d, err := s.Take(ctx, r) // its error, nothing counted
		return d, false, err
	}
	// The longest Delay, in whole ticks (a negative within: none at all).
	ticks := int64(-1)
	if within >= 0 {
		ticks = within.Microseconds() / t.Tick
	}
	return s.takeFlat(ctx, &r, t, ticks)
}
