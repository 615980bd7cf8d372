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
// The result has the optional methods s has, sluice.Resetter and
// sluice.WithinTaker, refusing an ended context there too, as the Redis
// store has both: a Limiter over ContextStore(memstore) can Reset, and its
// WaitN takes a leaky bucket slot within a deadline in one step. It has
// no sluice.KeyTaker: every decision goes through Take.
func ContextStore(s sluice.Store) sluice.Store {
	c := ctxStore{s}
	rs, canReset := s.(sluice.Resetter)
	wt, canWithin := s.(sluice.WithinTaker)
	switch {
	case canReset && canWithin:
		return ctxResetWithin{ctxReset{c, rs}, ctxWithin{c, wt}}
	case canReset:
		return ctxReset{c, rs}
	case canWithin:
		return ctxWithin{c, wt}
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

// ctxReset is a ctxStore over a sluice.Resetter.
type ctxReset struct {
	ctxStore
	rs sluice.Resetter
}

func (s ctxReset) Reset(ctx context.Context, r sluice.Request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sluicetest: reset %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return s.rs.Reset(ctx, r)
}

// ctxWithin is a ctxStore over a sluice.WithinTaker.
type ctxWithin struct {
	ctxStore
	wt sluice.WithinTaker
}

func (s ctxWithin) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, false, fmt.Errorf("sluicetest: take %q: %w: %w", r.Key, sluice.ErrStoreUnavailable, err)
	}
	return s.wt.TakeWithin(ctx, r, within)
}

// ctxResetWithin is a ctxStore over a store with both.
type ctxResetWithin struct {
	ctxReset
	w ctxWithin
}

func (s ctxResetWithin) TakeWithin(ctx context.Context, r sluice.Request, within time.Duration) (sluice.Decision, bool, error) {
	return s.w.TakeWithin(ctx, r, within)
}
