package httplimit

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
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
//   - what the server asked for: Retry-After (seconds or an HTTP date), else
//     the largest t of the RateLimit field's exhausted (r=0) limits (the IETF
//     httpapi draft's field, as SetHeaders writes it); else
//   - an exponential back-off with full jitter: a random wait in
//     [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)) before retry n.
//
// It gives up, returning the last 429/503 response as it came, when
// MaxAttempts attempts have been made, when the wait would end after
// MaxElapsed from the first attempt or at or after the request context's
// deadline, or when the shared Budget has no retry left. If the request
// context ends during a wait, RoundTrip returns its error (its cause, if
// it has one, as net/http's Transport does). The body of a 429/503 it
// retries is read during the wait, up to 64 KiB, and closed when the wait
// ends even if more is to come: a Base's response bodies must allow Close
// during a Read, as net/http's do.
//
// Only requests that are safe to send twice are retried: idempotent methods
// (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) and requests carrying an
// Idempotency-Key or X-Idempotency-Key header; other methods (POST, PATCH)
// only with RetryNonIdempotent. A request with a body is retried only if the
// body can be read again (Request.GetBody, which http.NewRequest sets for
// bytes, strings and bytes.Buffer bodies). Transport errors are returned,
// never retried: the request may have reached the server.
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
	// DefaultMaxElapsed.
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
	// Set it to make the waits reproducible.
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
	if !t.retryable(req) {
		maxAttempts = 1
	}
	maxElapsed := orDefault(t.MaxElapsed, DefaultMaxElapsed)
	ctx := req.Context()
	start := time.Now()
	attempt := req
	for n := 1; ; n++ {
		resp, err := base.RoundTrip(attempt)
		if err != nil {
			return nil, err
		}
		if resp == nil {
			return nil, errNoResponse
		}
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			budget.succeeded()
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
		// An attempt that would start at the deadline is cut off before
		// it is answered: the 429 in hand is better than that error.
		if dl, ok := ctx.Deadline(); ok && !end.Before(dl) {
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

// ServerWait is how long a 429 or 503 answer with header h, received at
// now, asks the client to wait: Retry-After (delay-seconds, or an HTTP date
// after now), else the largest t of the items of the RateLimit field whose
// r is 0. ok is false when h names no wait.
func ServerWait(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if v := h.Get(HeaderRetryAfter); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err == nil || errors.Is(err, strconv.ErrRange) {
			return seconds(s), true // ErrRange: s is the largest uint64
		}
		if at, err := http.ParseTime(v); err == nil {
			return max(at.Sub(now), 0), true
		}
	}
	if vs := h.Values(HeaderRateLimit); len(vs) > 0 {
		return RateLimitReset(vs...)
	}
	return 0, false
}

// seconds converts s seconds to a Duration, saturating.
func seconds(s uint64) time.Duration {
	const most = uint64(1<<63-1) / uint64(time.Second)
	if s > most {
		return 1<<63 - 1
	}
	return time.Duration(s) * time.Second
}

// RateLimitReset reads the RateLimit field (the IETF httpapi draft's
// service limit field, an RFC 9651 List such as `"api";r=0;t=37`; several
// field lines are one list) and returns the largest t, in seconds, among
// the items whose remaining quota r is 0: how long until every exhausted
// limit has room again. ok is false when no item has r=0 and a valid t.
// Items it cannot parse are skipped.
func RateLimitReset(fields ...string) (wait time.Duration, ok bool) {
	for _, f := range fields {
		for len(f) > 0 {
			var r, tt int64
			var hasR, hasT bool
			f = skipSFItem(f, func(key, val string) {
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil || n < 0 {
					return
				}
				switch key {
				case "r":
					r, hasR = n, true
				case "t":
					tt, hasT = n, true
				}
			})
			if hasR && hasT && r == 0 {
				if d := seconds(uint64(tt)); !ok || d > wait {
					wait, ok = d, true
				}
			}
		}
	}
	return wait, ok
}

// skipSFItem consumes one list member of s (up to a comma outside a quoted
// string), calls param for each of its parameters (";key=value"; a
// parameter without a value is skipped) and returns the rest of s after the
// comma. It is lenient: anything malformed ends up inside some member and
// is ignored rather than refused.
func skipSFItem(s string, param func(key, val string)) string {
	i := 0
	// The bare item: a string (skip its escapes) or a token.
	i = skipValue(s, i)
	for i < len(s) && s[i] != ',' {
		if s[i] != ';' {
			i = skipValue(s, i+1)
			continue
		}
		i++
		for i < len(s) && s[i] == ' ' {
			i++
		}
		k := i
		for i < len(s) && s[i] != '=' && s[i] != ';' && s[i] != ',' {
			i++
		}
		key := s[k:i]
		if i < len(s) && s[i] == '=' {
			v := i + 1
			i = skipValue(s, v)
			param(key, trimSpace(s[v:i]))
		}
	}
	if i < len(s) {
		i++ // the comma
	}
	return s[i:]
}

// skipValue returns the index of the first ';' or ',' at or after i that is
// not inside a quoted string.
func skipValue(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ';', ',':
			return i
		case '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		}
		i++
	}
	return len(s)
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// RetryBudget bounds the retries of every request that shares it to a
// fraction of the requests recently answered, as gRPC's retry throttling
// does. It holds tokens, at most maxTokens and that many at the start: each
// 429/503 answer takes one, each other answer gives back ratio, and a retry
// is allowed only while more than half of maxTokens remain. Under a lasting
// overload a client therefore retries about once per 1/ratio answers that
// succeed, and not at all while nothing succeeds, instead of multiplying
// its load by its attempts.
//
// The zero value is the default budget, DefaultRetryTokens tokens earning
// DefaultRetryRatio; NewRetryBudget makes others. A RetryBudget is safe
// for concurrent use and must not be copied after first use. Share one
// among the transports that should be bounded together.
type RetryBudget struct {
	mu sync.Mutex
	// In thousandths of a token, as gRPC counts them, so that ratio
	// steps add up exactly.
	milli, maxMilli, gain int64
}

// NewRetryBudget returns a full budget of maxTokens tokens (1 to 1000)
// where each answer that is not a 429/503 earns ratio of a token (above 0,
// at most 1, counted in thousandths).
func NewRetryBudget(ratio float64, maxTokens int) (*RetryBudget, error) {
	if !(ratio >= 0.001 && ratio <= 1) {
		return nil, errors.New("httplimit: retry budget ratio must be 0.001 to 1, got " + strconv.FormatFloat(ratio, 'g', -1, 64))
	}
	if maxTokens < 1 || maxTokens > 1000 {
		return nil, errors.New("httplimit: retry budget tokens must be 1 to 1000, got " + strconv.Itoa(maxTokens))
	}
	m := int64(maxTokens) * 1000
	return &RetryBudget{milli: m, maxMilli: m, gain: int64(ratio*1000 + 0.5)}, nil
}

// Tokens returns the tokens left; retries are allowed while it is above
// half the maximum.
func (b *RetryBudget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	return float64(b.milli) / 1000
}

func (b *RetryBudget) failed() {
	b.mu.Lock()
	b.init()
	b.milli = max(b.milli-1000, 0)
	b.mu.Unlock()
}

func (b *RetryBudget) succeeded() {
	b.mu.Lock()
	b.init()
	b.milli = min(b.milli+b.gain, b.maxMilli)
	b.mu.Unlock()
}

func (b *RetryBudget) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	return b.milli > b.maxMilli/2
}

// init makes a zero RetryBudget the default one, full; b.mu is held.
func (b *RetryBudget) init() {
	if b.maxMilli == 0 {
		b.maxMilli = DefaultRetryTokens * 1000
		b.milli = b.maxMilli
		b.gain = int64(DefaultRetryRatio * 1000)
	}
}
