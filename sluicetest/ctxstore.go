package sluicetest

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

// ContextStore returns s refusing every call whose context has ended, as a
// networked store does (the Redis store cannot send a command for a
// caller that has gone): the error wraps sluice.ErrStoreUnavailable and
// the context's error, and nothing is counted. Wrap an in-memory store in
// it to test how code above a store tells a client that went away (a
// cancelled context) from a store that failed or was too slow (a deadline
// that passed).
func ContextStore(s sluice.Store) sluice.Store { return ctxStore{s} }

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
