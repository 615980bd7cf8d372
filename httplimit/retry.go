package httplimit

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/ctxtime"
)

// Defaults of the zero RetryTransport and RetryBudget.
const (
	DefaultMaxAttempts = 4
	DefaultMaxElapsed  = 30 * time.Second
	DefaultBaseDelay   = 100 * time.Millisecond
	DefaultMaxDelay    = 10 * time.Second
	// DefaultRetryRatio and DefaultRetryTokens are the budget a
	// RetryTransport without a Budget makes for itself, and a zero
	// RetryBudget's: gRPC's usual retry throttling figures.
	DefaultRetryRatio  = 0.1
	DefaultRetryTokens = 10
)

// maxDrain bounds how much of a 429/503 body is read, during the wait,
// before it is closed, so that its connection can be reused.
const maxDrain = 64 << 10

// drainGrace is how long a retry after a shorter wait (Retry-After: 0)
// still waits for the body of the answer it drops, which has usually
// arrived with its header: long enough to keep the connection, short
// enough that a stalled body barely delays the retry.
const drainGrace = 50 * time.Millisecond

var errNoResponse = errors.New("httplimit: RetryTransport: Base returned neither a response nor an error")

// RetryTransport is an http.RoundTripper for clients of rate-limited APIs:
// it retries a request answered 429 Too Many Requests or 503 Service
// Unavailable, waiting first
//
//   - what the server asked for: Retry-After (seconds or an HTTP date, read
//     against the answer's Date), else the largest t of the RateLimit
//     field's exhausted (r=0) limits (the IETF httpapi draft's field, as
//     SetHeaders writes it; or the draft 07 form's reset when remaining=0),
//     else RateLimit-Reset or X-RateLimit-Reset (see ServerWait); else
//   - an exponential back-off with full jitter: a random wait in
//     [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)) before retry n.
//
// It gives up, returning the last 429/503 response as it came, when
// MaxAttempts attempts have been made, when the wait would end after
// MaxElapsed from the first attempt, or so late that the retry, taking as
// long as the fastest attempt so far took to be answered, would not be
// answered before the request context's deadline, or when the shared
// Budget has no retry left. If the request context ends during a wait,
// RoundTrip returns its error (its cause, if it has one, as net/http's
// Transport does). The body of a 429/503 it retries is read during the
// wait, up to 64 KiB, and closed when the wait ends even if more is to
// come: a Base's response bodies must allow Close during a Read, as
// net/http's do.
//
// Only requests that are safe to send twice are retried: idempotent methods
// (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) and requests carrying an
// Idempotency-Key or X-Idempotency-Key header; other methods (POST, PATCH)
// only with RetryNonIdempotent. A request with a body is retried only if the
// body can be read again (Request.GetBody, which http.NewRequest sets for
// bytes, strings and bytes.Buffer bodies). Transport errors are returned,
// never retried: the request may have reached the server. A retry sends a
// copy of the request; the answer's Request is the caller's, as net/http's
// Transport answers after its own retries.
//
// Use it as an http.Client's Transport:
//
//	client := &http.Client{Transport: &httplimit.RetryTransport{}}
//
// The zero value is ready to use. A RetryTransport is safe for concurrent
// use and must not be copied after first use; its fields must not change
// after first use.
type RetryTransport struct {
	// Base sends each attempt; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts caps the attempts per request, the first included; 0
	// means DefaultMaxAttempts, 1 disables retries.
	MaxAttempts int
	// MaxElapsed caps the time from the first attempt to the start of the
	// last one: a wait that would end later is not taken. 0 means
	// DefaultMaxElapsed. It bounds one RoundTrip: http.Client follows
	// each redirect with another, so a whole call, redirects included,
	// is bounded by http.Client.Timeout or a context deadline.
	MaxElapsed time.Duration
	// BaseDelay is the back-off's scale: the wait before retry n is random
	// in [0, BaseDelay·2ⁿ⁻¹), capped by MaxDelay. 0 means
	// DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps one back-off wait; 0 means DefaultMaxDelay. It does not
	// shorten a wait the server asked for (MaxElapsed bounds those).
	MaxDelay time.Duration
	// RetryNonIdempotent retries requests of every method, not only the
	// idempotent ones. Set it only when the server deduplicates, or when a
	// 429/503 is known to mean that the request was not processed.
	RetryNonIdempotent bool
	// Budget bounds retries across every request that shares it, so that a
	// client under a lasting overload stops retrying instead of multiplying
	// its load. nil: the transport makes its own, shared by all of its
	// requests, with DefaultRetryRatio and DefaultRetryTokens. Give several
	// transports one Budget to bound them together.
	Budget *RetryBudget
	// Jitter returns a random duration in [0, d); nil uses math/rand/v2.
	// Set it to make the waits reproducible. Concurrent requests call it
	// concurrently: a *rand.Rand (not safe for concurrent use) needs a
	// lock around it.
	Jitter func(d time.Duration) time.Duration

	once   sync.Once
	budget *RetryBudget
}

// RoundTrip sends req, and sends it again as the RetryTransport's doc says
// while the answer is 429 or 503.
func (t *RetryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base()
	budget := t.retryBudget()
	maxAttempts := t.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	// A request sent once, unsafe to repeat or on a transport whose
	// retries are off, takes nothing from the budget (see below).
	retryable := maxAttempts > 1 && t.retryable(req)
	if !retryable {
		maxAttempts = 1
	}
	maxElapsed := orDefault(t.MaxElapsed, DefaultMaxElapsed)
	ctx := req.Context()
	start := time.Now()
	attempt := req
	// The shortest time an attempt took to be answered: what a retry is
	// expected to take at least.
	fastest := time.Duration(1<<63 - 1)
	for n := 1; ; n++ {
		sent := time.Now()
		resp, err := base.RoundTrip(attempt)
		if err != nil {
			return nil, err
		}
		if resp == nil {
			return nil, errNoResponse
		}
		if attempt != req {
			// The answer to a retry, sent as a copy, is the caller's
			// request's, as net/http's Transport answers after its own
			// retries.
			resp.Request = req
		}
		fastest = min(fastest, time.Since(sent))
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			// As gRPC's throttling: only a success gives back; an error
			// that is not retried neither gives back nor takes.
			if resp.StatusCode < 400 {
				budget.succeeded()
			}
			return resp, nil
		}
		if !retryable {
			// As gRPC's throttling, which counts the failures of calls
			// with a retry policy only: a refusal of a request never
			// retried must not stop the retries of those that are.
			return resp, nil
		}
		budget.failed()
		if n >= maxAttempts {
			return resp, nil
		}
		if !budget.allow() {
			return resp, nil
		}
		now := time.Now()
		wait, ok := ServerWait(resp.Header, now)
		if !ok {
			wait = t.backoff(n)
		}
		end := now.Add(wait)
		if end.Sub(start) > maxElapsed {
			return resp, nil
		}
		// An attempt that would start too late to be answered before
		// the deadline, in as long as the fastest one so far took, is
		// cut off: the 429 in hand, at once, is better than that error
		// after the wait.
		if dl, ok := ctx.Deadline(); ok && !end.Add(fastest).Before(dl) {
			return resp, nil
		}
		next, err := again(req)
		if err != nil {
			// The body cannot be read again after all: the answer in
			// hand is the best there is.
			return resp, nil
		}
		if pause(ctx, resp, wait) != nil {
			if next.Body != nil {
				next.Body.Close()
			}
			// As net/http's Transport answers a cancelled attempt.
			return nil, context.Cause(ctx)
		}
		attempt = next
	}
}

// CloseIdleConnections closes the idle connections of the Base (of
// http.DefaultTransport when Base is nil), if it has that method, so that
// http.Client.CloseIdleConnections reaches through the RetryTransport.
func (t *RetryTransport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *RetryTransport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

// retryBudget is t.Budget, or the transport's own.
func (t *RetryTransport) retryBudget() *RetryBudget {
	if t.Budget != nil {
		return t.Budget
	}
	t.once.Do(func() {
		t.budget, _ = NewRetryBudget(DefaultRetryRatio, DefaultRetryTokens)
	})
	return t.budget
}

// retryable reports whether req may be sent more than once.
func (t *RetryTransport) retryable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if t.RetryNonIdempotent {
		return true
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	// As net/http's own Transport: the presence of the key, even empty,
	// marks the request as safe to repeat.
	_, ok := req.Header["Idempotency-Key"]
	if !ok {
		_, ok = req.Header["X-Idempotency-Key"]
	}
	return ok
}

// backoff is the wait before retry n (1, 2, …): full jitter over
// min(MaxDelay, BaseDelay·2ⁿ⁻¹).
func (t *RetryTransport) backoff(n int) time.Duration {
	base := orDefault(t.BaseDelay, DefaultBaseDelay)
	ceiling := orDefault(t.MaxDelay, DefaultMaxDelay)
	d := ceiling
	if n-1 < 62 && base <= ceiling>>(n-1) {
		d = base << (n - 1)
	}
	if t.Jitter != nil {
		return min(max(t.Jitter(d), 0), d)
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// again returns a copy of req to send once more, with a fresh body.
func again(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return next, nil
	}
	if req.GetBody == nil {
		return nil, errors.New("httplimit: request body cannot be replayed")
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	next.Body = body
	return next, nil
}

// pause waits d, or until ctx ends (returning its error), and meanwhile
// reads what arrives of resp's body, up to maxDrain bytes, so that its
// connection can be reused; then it closes the body. The reading is cut
// off when the wait ends, or drainGrace after it began if the wait is
// shorter: a slow or stalled body never holds up the retry longer, and
// only costs its connection.
func pause(ctx context.Context, resp *http.Response, d time.Duration) error {
	if resp.Body == nil {
		return ctxtime.Sleep(ctx, d)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.CopyN(io.Discard, resp.Body, maxDrain)
	}()
	err := ctxtime.Sleep(ctx, d)
	if err == nil && d < drainGrace {
		grace := time.NewTimer(drainGrace - d)
		select {
		case <-drained:
		case <-grace.C:
		case <-ctx.Done():
			err = ctx.Err()
		}
		grace.Stop()
	}
	// Closing ends a read in progress (net/http's bodies allow it), so
	// the drain is over when Close returns or soon after.
	resp.Body.Close()
	<-drained
	return err
}
