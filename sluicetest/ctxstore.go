package sluicetest

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// ContextStore returns s refusing every call whose context has ended, as a
// networked store does (the Redis store cannot send a command for a
// caller that has gone): the error wraps sluice.ErrStoreUnavailable and
// the context's error, and nothing is counted. Wrap an in-memory store in
// it to test how code above a store tells a client that went away (a
// cancelled context) from a store that failed or was too slow (a deadline
// that passed).
//
// The result has the optional methods s has, sluice.Resetter,
// sluice.WithinTaker and sluice.Refunder, refusing an ended context there
// too, as the Redis store has all three: a Limiter over
// ContextStore(memstore) can Reset, and its WaitN takes a leaky bucket
// slot within a deadline in one step. It has no sluice.KeyTaker: every
// decision goes through Take.
func ContextStore(s sluice.Store) sluice.Store {
	c := ctxStore{s}
	rs, r := s.(sluice.Resetter)
	wt, w := s.(sluice.WithinTaker)
	rf, f := s.(sluice.Refunder)
	R, W, F := ctxReset{rs}, ctxWithin{wt}, ctxRefund{rf}
	switch {
	case r && w && f:
		return struct {
			ctxStore
			ctxReset
			ctxWithin
			ctxRefund
		}{c, R, W, F}
	case r && w:
		return struct {
			ctxStore
			ctxReset
			ctxWithin
		}{c, R, W}
	case r && f:
		return struct {
			ctxStore
			ctxReset
			ctxRefund
		}{c, R, F}
	case w && f:
		return struct {
			ctxStore
			ctxWithin
			ctxRefund
		}{c, W, F}
	case r:
		return struct {
			ctxStore
			ctxReset
		}{c, R}
	case w:
		return struct {
			ctxStore
			ctxWithin
		}{c, W}
	case f:
		return struct {
			ctxStore
			ctxRefund
		}{c, F}
	}
	return c
}

type ctxStore struct{ sluice.Store }

func (s ctxStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, fmt.Errorf("sluicetest: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return s.Store.Take(ctx, r)
}

func (s ctxStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sluicetest: take all: %w: %w", sluice.ErrStoreUnavailable, err)
	}
	return s.Store.TakeAll(ctx, rs, ds)
}

// ctxReset, ctxWithin and ctxRefund each carry one optional method of
// the wrapped store, refusing an ended context; ContextStore embeds those
// the store has.
type (
	ctxReset  struct{ rs sluice.Resetter }
	ctxWithin struct{ wt sluice.WithinTaker }
	ctxRefund struct{ rf sluice.Refunder }
)

func (s ctxReset) Reset(ctx context.Context, r sluice.Request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sluicetest: reset %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return s.rs.Reset(ctx, r)
}

func (s ctxWithin) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, false, fmt.Errorf("sluicetest: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return s.wt.TakeWithin(ctx, r, within)
}

func (s ctxRefund) Refund(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, fmt.Errorf("sluicetest: refund %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return s.rf.Refund(ctx, r)
}
