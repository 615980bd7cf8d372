package redisstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

var _ sluice.Refunder = (*Store)(nil)

// Refund gives r.Cost units back to r's key (sluice.Refunder): the
// general script runs sluice.Algorithm.Refund's Lua twin on the key,
// atomically, in one round trip, on Redis' clock with Options.RedisTime.
// A failure wraps sluice.ErrStoreUnavailable; a refund that timed out
// may have been given back or not. With Options.PublishRefunds, the
// script also publishes the key on RefundChannel (see WatchRefunds) if it
// left the key counting less: not for a cost of 0, nor for units whose
// window has gone (nothing for the other caches to forget).
func (s *Store) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	r.Force = false
	var q request
	if err := s.prepare(&r, &q); err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: refund %q: %w", r.Key, err)
	}
	ctx = s.deadlines.bound(ctx)
	args := append([]string{"give", s.useTime, s.margin}, q.args[:]...)
	if s.opts.PublishRefunds {
		args = append(args, s.RefundChannel(), refundMessage(r.Namespace, r.Key))
	}
	rps, err := s.exec(ctx, s.all, []string{q.key}, args, 1)
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: refund %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return q.decision(rps[0]), nil
}
