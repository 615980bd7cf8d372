package sluice

import (
	"context"
	"fmt"
	"time"
)

// Limiter applies one Limit, by one Algorithm, to many keys kept in a Store.
// It is safe for concurrent use.
//
// Every method has an explicit-time form (AllowAt) and a clock shorthand
// (Allow, AllowN) that reads the Limiter's clock, time.Now unless set with
// WithClock.
type Limiter struct {
	store Store
	alg   Algorithm
	limit Limit
	now   func() time.Time
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the Limiter read time from now instead of time.Now.
func WithClock(now func() time.Time) Option { return func(l *Limiter) { l.now = now } }

// NewLimiter returns a Limiter that enforces limit by alg on store.
func NewLimiter(store Store, alg Algorithm, limit Limit, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("sluice: NewLimiter: nil store")
	}
	if !alg.Valid() {
		return nil, fmt.Errorf("sluice: NewLimiter: %w: %d", ErrUnknownAlgorithm, uint8(alg))
	}
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("sluice: NewLimiter: %w", err)
	}
	l := &Limiter{store: store, alg: alg, limit: limit, now: time.Now}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Limit returns the limit l enforces.
func (l *Limiter) Limit() Limit { return l.limit }

// Algorithm returns the algorithm l uses.
func (l *Limiter) Algorithm() Algorithm { return l.alg }

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowAt(ctx, key, l.now(), 1)
}

// AllowN decides a request of cost n for key now, counting it if allowed.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	return l.AllowAt(ctx, key, l.now(), n)
}

// AllowAt decides a request of cost n for key at the instant now.
func (l *Limiter) AllowAt(ctx context.Context, key string, now time.Time, n int64) (Decision, error) {
	return l.store.Take(ctx, Request{Key: key, Algorithm: l.alg, Limit: l.limit, Cost: n, Now: now})
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until a request of cost n for key is admitted, then returns
// its decision. For the leaky bucket it also waits out the admitted
// request's Delay, so callers proceed evenly spaced; for the others it
// sleeps each RetryAfter and asks again. It returns ctx.Err() if ctx ends
// first (a leaky bucket slot already taken is not given back), and
// ErrNeverAllowed if n exceeds what the limit can ever admit.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil {
			return d, err
		}
		wait := d.Delay
		if !d.Allowed {
			if d.RetryAfter < 0 {
				return d, fmt.Errorf("sluice: wait %q: %w", key, ErrNeverAllowed)
			}
			wait = max(d.RetryAfter, time.Microsecond)
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return d, ctx.Err()
			case <-t.C:
			}
		}
		if d.Allowed {
			return d, nil
		}
	}
}
