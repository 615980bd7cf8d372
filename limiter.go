package sluice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter applies a Limit, by one Algorithm, to many keys kept in a Store.
// It is safe for concurrent use. Build one with NewLimiter: the zero
// Limiter has no store, and its methods return an error.
//
// Every method has an explicit-time form (AllowAt) and a clock shorthand
// (Allow, AllowN) that reads the Limiter's clock, time.Now unless set with
// WithClock.
//
// # Keys are namespaced
//
// A Limiter keeps its keys apart from every other Limiter's on the same
// store: each request carries a Namespace naming what it counts (the
// Limiter's name, its algorithm and the limit, see Namespace), and the
// store keeps one state per namespace and key. Two limiters can therefore
// share a store and a key without reading each other's counts, and a
// limiter whose limit changes (SetLimit, a new NewLimiter after a deploy, a
// per-call limit) starts a fresh count for each key under the new limit:
// what a key spent under the old limit is not carried over. The old state
// is dropped when it would be at rest (memstore) or expires (redisstore).
// Two limiters with the same name, algorithm and limit on one store share
// their counts, which is what several servers on one Redis want; give
// limiters that must count apart different names (WithName).
type Limiter struct {
	store Store
	fast  KeyTaker // store's fast path, if it has one (see KeyTaker)
	alg   Algorithm
	name  string
	now   func() time.Time // nil: time.Now
	cur   atomic.Pointer[current]

	// spaces caches the namespaces of per-call limits (AllowLimit), up to
	// maxSpaces of them.
	spaces  sync.Map // Limit -> string
	nspaces atomic.Int32
}

// current is the limit in force and its namespace, swapped as one, with
// the Request AllowAt sends for them (Key, Cost and Now left to fill).
type current struct {
	limit Limit
	ns    string
	req   Request
}

// newCurrent returns the current of a limiter enforcing limit by alg.
func newCurrent(name string, alg Algorithm, limit Limit) *current {
	ns := namespace(name, alg, limit)
	return &current{limit: limit, ns: ns, req: Request{Namespace: ns, Algorithm: alg, Limit: limit}}
}

const maxSpaces = 256

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the Limiter read time from now instead of time.Now.
// Wait and WaitN still sleep on the runtime's timers: under a clock that
// does not move with them (a fixed time, a sluicetest.Clock), a refused
// Wait asks again at the same instant, is refused again, and sleeps
// until its context ends. Test Wait with the default clock inside a
// testing/synctest bubble, where sleeping takes no real time.
func WithClock(now func() time.Time) Option { return func(l *Limiter) { l.now = now } }

// WithName names the Limiter. The name is part of its Namespace: limiters
// with the same algorithm and limit but different names count apart on one
// store. It must not contain '|', '{' or '}'.
func WithName(name string) Option { return func(l *Limiter) { l.name = name } }

// errZero is what the zero Limiter's methods return.
var errZero = errors.New("sluice: Limiter not built by NewLimiter (no store)")

// NewLimiter returns a Limiter that enforces limit by alg on store.
func NewLimiter(store Store, alg Algorithm, limit Limit, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("sluice: NewLimiter: nil store")
	}
	if !alg.Valid() {
		return nil, fmt.Errorf("sluice: NewLimiter: %w: %d", ErrUnknownAlgorithm, uint8(alg))
	}
	if err := alg.ValidateLimit(limit); err != nil {
		return nil, fmt.Errorf("sluice: NewLimiter: %w", err)
	}
	l := &Limiter{store: store, alg: alg}
	for _, o := range opts {
		o(l)
	}
	if strings.ContainsAny(l.name, "|{}") {
		return nil, fmt.Errorf("sluice: NewLimiter: name %q must not contain '|', '{' or '}'", l.name)
	}
	// l.now stays nil for time.Now, which clock then calls directly
	// rather than through a func value.
	l.fast, _ = store.(KeyTaker)
	l.cur.Store(newCurrent(l.name, alg, limit))
	return l, nil
}

// namespace is the Namespace of requests of a limiter named name enforcing
// lim by alg, such as "api|token_bucket,100/m,burst=200|": readable in
// redis-cli, and the same for limits that decide the same (Burst 0 and
// Burst Rate; Segments 0 and 1).
func namespace(name string, alg Algorithm, lim Limit) string {
	b := make([]byte, 0, len(name)+48)
	if name != "" {
		b = append(b, name...)
		b = append(b, '|')
	}
	b = append(b, alg.String()...)
	b = append(b, ',')
	b = append(b, lim.String()...)
	if lim.Burst != 0 && lim.Burst != lim.Rate {
		b = append(b, ",burst="...)
		b = strconv.AppendInt(b, lim.Burst, 10)
	}
	if alg == SlidingWindowCounter && lim.Segments > 1 {
		b = append(b, ",segments="...)
		b = strconv.AppendInt(b, int64(lim.Segments), 10)
	}
	return string(append(b, '|'))
}

// Limit returns the limit l enforces.
func (l *Limiter) Limit() Limit {
	if c := l.cur.Load(); c != nil {
		return c.limit
	}
	return Limit{}
}

// SetLimit changes the limit l enforces from now on. Keys start a fresh
// count under the new limit (see "Keys are namespaced"); setting the limit
// in force again finds the counts it left, if they have not expired.
func (l *Limiter) SetLimit(limit Limit) error {
	if l.store == nil {
		return errZero
	}
	if err := l.alg.ValidateLimit(limit); err != nil {
		return fmt.Errorf("sluice: SetLimit: %w", err)
	}
	l.cur.Store(newCurrent(l.name, l.alg, limit))
	return nil
}

// Algorithm returns the algorithm l uses.
func (l *Limiter) Algorithm() Algorithm { return l.alg }

// Name returns the name given with WithName.
func (l *Limiter) Name() string { return l.name }

// Store returns the store l keeps its counts in.
func (l *Limiter) Store() Store { return l.store }

// Namespace returns the Request.Namespace of l's requests under the limit
// in force: "NAME|ALGORITHM,LIMIT|" with the name part left out when l has
// none, and ",burst=N" (",segments=N") added when the limit sets them, such
// as "api|token_bucket,100/m,burst=200|". A Redis key holds it in front of
// the request's key.
func (l *Limiter) Namespace() string {
	if c := l.cur.Load(); c != nil {
		return c.ns
	}
	return ""
}

// Now reads l's clock (WithClock; time.Now by default): the instant Allow
// decides at. Code that builds requests for Store.TakeAll (Request) reads
// it too.
func (l *Limiter) Now() time.Time { return l.clock() }

// clock reads l's clock: time.Now unless WithClock set another.
func (l *Limiter) clock() time.Time {
	if l.now == nil {
		return time.Now()
	}
	return l.now()
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	ok, lim, rem, retry, reset, delay, err := l.take(ctx, key, l.clock(), 1)
	return Decision{Allowed: ok, Limit: lim, Remaining: rem, RetryAfter: retry, ResetAfter: reset, Delay: delay}, err
}

// AllowN decides a request of cost n for key now, counting it if allowed.
// A negative n is a programming error: the error wraps ErrInvalidCost and
// nothing is counted.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	ok, lim, rem, retry, reset, delay, err := l.take(ctx, key, l.clock(), n)
	return Decision{Allowed: ok, Limit: lim, Remaining: rem, RetryAfter: retry, ResetAfter: reset, Delay: delay}, err
}

// AllowAt decides a request of cost n for key at the instant now.
func (l *Limiter) AllowAt(ctx context.Context, key string, now time.Time, n int64) (Decision, error) {
	ok, lim, rem, retry, reset, delay, err := l.take(ctx, key, now, n)
	return Decision{Allowed: ok, Limit: lim, Remaining: rem, RetryAfter: retry, ResetAfter: reset, Delay: delay}, err
}

// take is AllowAt with the Decision returned field by field. A Decision
// (six fields) returned from a call lands in memory and is copied 16 bytes
// at a time out of a place just written 8 bytes at a time, which stalls
// the CPU (no store forwarding); single words come back in registers. So
// the hot path, from the store's KeyTaker to the exported methods, passes
// words, and only the exported methods build the Decision.
func (l *Limiter) take(ctx context.Context, key string, now time.Time, n int64) (ok bool, limit, remaining int64, retry, reset, delay time.Duration, err error) {
	c := l.cur.Load()
	if c == nil {
		return false, 0, 0, 0, 0, 0, errZero
	}
	if n < 0 {
		return false, 0, 0, 0, 0, 0, invalidCost(key, n)
	}
	if l.fast != nil {
		// c.req is immutable once c is published, and on the heap: the
		// store reads it through the pointer, nothing is copied.
		ok, remaining, retry, reset, delay, err = l.fast.TakeKey(ctx, &c.req, key, n, now)
		if err != nil {
			return false, 0, 0, 0, 0, 0, err
		}
		return ok, c.limit.Rate, remaining, retry, reset, delay, nil
	}
	r := c.req
	r.Key, r.Cost, r.Now = key, n, now
	d, err := l.store.Take(ctx, r)
	return d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, err
}

// Report charges n to key now even past the limit (Request.Force): for a
// cost known only once the work is done, such as the tokens of an LLM
// response. The overage is carried as debt, so Allow refuses key until it
// has drained (Algorithm.Charge says what debt is per algorithm).
// Decision.Allowed tells whether the charge fitted under the limit; it is
// counted either way.
func (l *Limiter) Report(ctx context.Context, key string, n int64) (Decision, error) {
	r, err := l.Request(key, l.clock(), n)
	if err != nil {
		return Decision{}, err
	}
	r.Force = true
	return l.store.Take(ctx, r)
}

// AllowLimit decides a request of cost n for key now under lim instead of
// the limit in force: one Limiter for limits chosen per call, such as
// per-plan quotas (free 100/h, pro 10000/h). Each limit counts apart (see
// "Keys are namespaced"), so a key that changes plan starts afresh. An
// invalid lim gives an error wrapping ErrInvalidLimit.
func (l *Limiter) AllowLimit(ctx context.Context, key string, lim Limit, n int64) (Decision, error) {
	return l.AllowLimitAt(ctx, key, lim, l.clock(), n)
}

// AllowLimitAt is AllowLimit at the instant now.
func (l *Limiter) AllowLimitAt(ctx context.Context, key string, lim Limit, now time.Time, n int64) (Decision, error) {
	r, err := l.RequestLimit(key, lim, now, n)
	if err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, r)
}

// Request returns the Request AllowAt would send to the store, for callers
// that decide several limiters' requests at once with Store.TakeAll (as
// httplimit does). A negative n gives an error wrapping ErrInvalidCost.
func (l *Limiter) Request(key string, now time.Time, n int64) (Request, error) {
	c := l.cur.Load()
	if c == nil {
		return Request{}, errZero
	}
	if n < 0 {
		return Request{}, invalidCost(key, n)
	}
	return Request{Namespace: c.ns, Key: key, Algorithm: l.alg, Limit: c.limit, Cost: n, Now: now}, nil
}

// RequestLimit is Request under lim instead of the limit in force.
func (l *Limiter) RequestLimit(key string, lim Limit, now time.Time, n int64) (Request, error) {
	if l.store == nil {
		return Request{}, errZero
	}
	if n < 0 {
		return Request{}, invalidCost(key, n)
	}
	ns, err := l.namespaceOf(lim)
	if err != nil {
		return Request{}, err
	}
	return Request{Namespace: ns, Key: key, Algorithm: l.alg, Limit: lim, Cost: n, Now: now}, nil
}

// namespaceOf returns the namespace of lim, from the cache when it can.
func (l *Limiter) namespaceOf(lim Limit) (string, error) {
	if c := l.cur.Load(); c.limit == lim {
		return c.ns, nil
	}
	if ns, ok := l.spaces.Load(lim); ok {
		return ns.(string), nil
	}
	if err := l.alg.ValidateLimit(lim); err != nil {
		return "", fmt.Errorf("sluice: %w", err)
	}
	ns := namespace(l.name, l.alg, lim)
	if l.nspaces.Load() < maxSpaces {
		if _, loaded := l.spaces.LoadOrStore(lim, ns); !loaded {
			l.nspaces.Add(1)
		}
	}
	return ns, nil
}

// Reset forgets key's count under the limit in force: its next request
// finds a full allowance. The store must implement Resetter (memstore and
// redisstore do); otherwise the error wraps errors.ErrUnsupported.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.ResetLimit(ctx, key, l.Limit())
}

// ResetLimit is Reset for the count key keeps under lim (see AllowLimit).
func (l *Limiter) ResetLimit(ctx context.Context, key string, lim Limit) error {
	r, err := l.RequestLimit(key, lim, time.Time{}, 0)
	if err != nil {
		return err
	}
	rs, ok := l.store.(Resetter)
	if !ok {
		return fmt.Errorf("sluice: reset %q: store %T: %w", key, l.store, errors.ErrUnsupported)
	}
	return rs.Reset(ctx, r)
}

func invalidCost(key string, n int64) error {
	return fmt.Errorf("sluice: key %q: %w: %d is negative", key, ErrInvalidCost, n)
}
