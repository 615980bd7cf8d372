// Package httplimit is rate limiting for net/http: a middleware that
// decides each request with one or several sluice.Limiters (in one store
// call), sets the rate-limit response headers, and answers 429 with a JSON
// body when a request is over a limit. Its helpers (SetHeaders,
// WriteLimited) are what the sluice daemon itself sends, so library and
// daemon answers look the same.
//
// Every request a limit applies to gets these headers (see SetHeaders),
// with the tightest limit's figures when several apply:
//
//	X-RateLimit-Limit: 100
//	X-RateLimit-Remaining: 41
//	X-RateLimit-Reset: 37
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=41;t=37
//
// and a request over the limit gets
//
//	HTTP/1.1 429 Too Many Requests
//	Retry-After: 2
//	X-RateLimit-Retry-After: 2
//	Content-Type: application/json
//
//	{"error":"rate_limited","rule":"api","retry_after_ms":1500}
//
// Keys: KeyByRemoteIP (the default), KeyByClientIP (the client behind
// trusted proxies, see package clientip), KeyByHeader, KeyByQuery,
// KeyByCookie, and Keys to combine them.
//
// The client side: RetryTransport is an http.RoundTripper that honours
// these answers, waiting Retry-After (or the RateLimit field's reset) on a
// 429 or 503 before it retries, with a retry budget shared by all of a
// client's requests so that retries cannot multiply an overload.
package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/ctxtime"
)

// ErrorPolicy says what the middleware does when the limiter's store cannot
// decide (sluice.ErrStoreUnavailable, a timeout).
type ErrorPolicy uint8

const (
	// FailOpen lets the request through, without rate-limit headers. It is
	// the zero value: an outage of the limiter does not become an outage of
	// the API. The middleware logs it (see Options.Logger).
	FailOpen ErrorPolicy = iota
	// FailClosed answers 503 Service Unavailable with
	// {"error":"store_unavailable"}.
	FailClosed
)

// KeyFunc returns the key a request is counted under; ok false means the
// limit does not apply to the request.
type KeyFunc func(r *http.Request) (key string, ok bool)

// Rule is one limit of a middleware: a Limiter, the key it counts requests
// under, and its name in the headers.
type Rule struct {
	// Name names the limit in RateLimit-Policy, RateLimit and the 429
	// body's "rule"; "" means "default". It also prefixes the rule's store
	// keys (Name + ":" + key, with a ':' or '%' in Name written %3A or
	// %25), so rules with different names count apart even on one Limiter.
	Name string
	// Limiter decides the rule's requests. Required.
	Limiter *sluice.Limiter
	// KeyFunc returns the key a request is counted under; ok false means
	// the rule does not apply to it. nil means KeyByRemoteIP. A key
	// longer than MaxKeyLen is counted under its digest.
	KeyFunc KeyFunc
	// LimitFunc, if set, chooses the limit per request (per-plan quotas:
	// free 100/h, pro 10000/h on one Limiter); ok false means the
	// Limiter's own limit. Each limit counts apart (Limiter.AllowLimit).
	LimitFunc func(r *http.Request) (sluice.Limit, bool)
}

// Options configures Middleware. Limiter (or Rules) is required; every
// other field has a working zero value.
type Options struct {
	// Limiter, Name, KeyFunc and LimitFunc are the first rule (see Rule);
	// leave Limiter nil to give only Rules.
	Limiter   *sluice.Limiter
	Name      string
	KeyFunc   KeyFunc
	LimitFunc func(r *http.Request) (sluice.Limit, bool)
	// Rules are further limits. Every rule that applies to a request is
	// decided together, in one Store.TakeAll: the request passes only if
	// all allow it, and a request denied by one consumes nothing from the
	// others. Their Limiters must share one Store.
	Rules []Rule
	// Cost returns what a request costs (nil: 1), under every rule. A
	// negative cost is a programming error: the request gets 500 and
	// {"error":"invalid_cost"}, is logged, and counts nowhere; it never
	// passes as if the store had failed. So does a Limiter clock
	// (sluice.WithClock) reading a time outside sluice.MinTime …
	// sluice.MaxTime, such as a test clock never set: 500 and
	// {"error":"invalid_time"}.
	Cost func(r *http.Request) int64
	// OnError chooses between FailOpen (the zero value) and FailClosed.
	OnError ErrorPolicy
	// OnStoreError, if set, is called with each store error before OnError
	// applies: count it there. A request whose context was cancelled
	// before the store answered (its client went away) is not a store
	// error: it is answered 499 (StatusClientClosedRequest), neither
	// reported nor passed to the next handler. One whose deadline passed first is: the store was slower
	// than the request allows.
	OnStoreError func(r *http.Request, err error)
	// DenyHandler, if set, writes the answer for a denied request in place
	// of WriteLimited; d is the decision of the rule that denied it (the
	// longest wait if several did). The rate-limit headers are already set.
	// If it writes nothing (no status, body, flush or hijack: it only
	// counted or logged the denial), the answer is WriteLimited's, never
	// net/http's empty 200. Its ResponseWriter wraps the middleware's: it
	// is an http.Flusher and an http.Hijacker, and http.ResponseController
	// reaches the one beneath.
	DenyHandler func(w http.ResponseWriter, r *http.Request, d sluice.Decision)
	// Logger receives store failures and invalid costs, at most one
	// record a second (with the number of records left out since the last
	// one); nil means slog.Default(). Discard them with
	// slog.New(slog.DiscardHandler).
	Logger *slog.Logger
}

// rule is a Rule ready to use.
type rule struct {
	Rule
	prefix string // Name + ":"
}

// Middleware returns net/http middleware that limits requests as opts say.
// For each request it finds the rules that apply (their KeyFunc returns
// ok) and decides them in one store call; an allowed request gets the
// tightest rule's rate-limit headers and goes to the next handler, after
// waiting out the longest Delay (the leaky bucket is a shaper: admitted
// requests leave evenly spaced; the Delay counts from the decision, so the
// store's round trip is part of it, not added to it); a denied one gets the denying rule's
// headers and the 429 answer of WriteLimited and never reaches the next
// handler. If the client goes away during a Delay, the next handler is not
// called and the answer is 499 (StatusClientClosedRequest), without body or
// rate-limit headers, as for a client gone before the store answered; the
// request stays counted (it was admitted), except for its
// leaky bucket places that have not left, which are given back on a store
// with sluice.Refunder, for the next requests to take. If the
// request's own deadline passes during its Delay (a timeout set around
// the middleware; its client still there), the same holds, but the answer
// is 503 Service Unavailable with Retry-After, the rest of its wait, and
// {"error":"deadline_exceeded","retry_after_ms":N}: the queue was longer
// than the request allows. A request no rule applies to passes, without
// headers.
//
// The tightest rule is the one that denied (the longest RetryAfter if
// several did), else the one with the lowest Remaining, ties going to the
// longest ResetAfter: the same choice the sluice daemon makes. The same
// choice holds across middlewares stacked one inside another (a global
// limit around a route's): an admitted request keeps the rate-limit
// headers a middleware around this one set when they are tighter (a lower
// X-RateLimit-Remaining, or the same and a longer X-RateLimit-Reset).
// Rules in one middleware are still better than stacking: a request the
// inner middleware denies stays counted by the outer one.
//
// It panics if no rule has a Limiter, if a rule's Limiter was not built by
// sluice.NewLimiter (the zero Limiter), or if the rules' Limiters do not
// share one Store.
func Middleware(opts Options) func(http.Handler) http.Handler {
	var rs []rule
	if opts.Limiter != nil {
		rs = append(rs, newRule(Rule{Name: opts.Name, Limiter: opts.Limiter, KeyFunc: opts.KeyFunc, LimitFunc: opts.LimitFunc}))
	}
	for _, r := range opts.Rules {
		if r.Limiter == nil {
			panic("httplimit: Middleware: a Rule without a Limiter")
		}
		rs = append(rs, newRule(r))
	}
	if len(rs) == 0 {
		panic("httplimit: Middleware: nil Options.Limiter and no Rules")
	}
	for _, r := range rs {
		if r.Limiter.Store() == nil {
			panic("httplimit: Middleware: rule " + r.Name + "'s Limiter was not built by sluice.NewLimiter")
		}
	}
	store := rs[0].Limiter.Store()
	for _, r := range rs[1:] {
		if !sameStore(store, r.Limiter.Store()) {
			panic("httplimit: Middleware: rules " + rs[0].Name + " and " + r.Name + " use different stores: rules decided together must share one")
		}
	}
	m := &middleware{opts: opts, rules: rs, store: store, log: opts.Logger}
	if m.log == nil {
		m.log = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

func newRule(r Rule) rule {
	if r.Name == "" {
		r.Name = "default"
	}
	if r.KeyFunc == nil {
		r.KeyFunc = KeyByRemoteIP
	}
	return rule{Rule: r, prefix: keyPrefix(r.Name)}
}

// keyPrefix is the prefix of the store keys of the rule named name: name
// and ":", with the ':' and '%' of name escaped so that the first ':' of
// a store key always ends the name. Otherwise rule "api" counting key
// "v2:x" would count rule "api:v2"'s key "x".
func keyPrefix(name string) string {
	if !strings.ContainsAny(name, ":%") {
		return name + ":"
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case ':':
			b.WriteString("%3A")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte(':')
	return b.String()
}

// sameStore compares stores, treating incomparable ones as different.
func sameStore(a, b sluice.Store) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

type middleware struct {
	opts  Options
	rules []rule
	store sluice.Store
	log   *slog.Logger

	next    atomic.Int64 // unix ns before which nothing is logged
	dropped atomic.Int64 // records left out since the last one
}

// maxRules is how many rules a request's decision keeps on the stack.
const maxRules = 4

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	cost := int64(1)
	if m.opts.Cost != nil {
		cost = m.opts.Cost(r)
	}
	// One rule applying is the common case: its request and decision stay
	// on the stack (a slice handed to TakeAll escapes).
	var (
		one    sluice.Request
		oneD   sluice.Decision
		reqs   []sluice.Request // when several rules apply
		idxBuf [maxRules]int
		err    error
		asked  time.Time // the first rule's now: what its Delay counts from
	)
	idx := idxBuf[:0]
	for i := range m.rules {
		ru := &m.rules[i]
		key, ok := ru.KeyFunc(r)
		if !ok {
			continue
		}
		key = boundKey(key)
		var q sluice.Request
		now := ru.Limiter.Now()
		if lim, ok := m.limitOf(ru, r); ok {
			q, err = ru.Limiter.RequestLimit(ru.prefix+key, lim, now, cost)
		} else {
			q, err = ru.Limiter.Request(ru.prefix+key, now, cost)
		}
		if err != nil {
			break
		}
		switch len(idx) {
		case 0:
			one, asked = q, now
		case 1:
			reqs = make([]sluice.Request, 2, len(m.rules))
			reqs[0], reqs[1] = one, q
		default:
			reqs = append(reqs, q)
		}
		idx = append(idx, i)
	}
	if err == nil && len(idx) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	var ds []sluice.Decision
	if err == nil {
		if len(idx) == 1 {
			oneD, err = m.store.Take(r.Context(), one)
		} else {
			ds = make([]sluice.Decision, len(reqs))
			err = m.store.TakeAll(r.Context(), reqs, ds)
		}
	}
	if err != nil {
		if invalid(err) {
			m.logf(slog.LevelError, "httplimit: invalid request to the limiter: the request was refused", err)
			writeInvalid(w, err)
			return
		}
		if errors.Is(r.Context().Err(), context.Canceled) {
			// The client went away before the store answered: the
			// store did not fail, and the request must not run
			// uncounted. A deadline that passed (http.TimeoutHandler, a
			// timeout shorter than the store's) is a store slower than
			// the request allows: a store failure, below.
			writeGone(w)
			return
		}
		if m.opts.OnStoreError != nil {
			m.opts.OnStoreError(r, err)
		}
		if m.opts.OnError == FailClosed {
			m.logf(slog.LevelWarn, "httplimit: rate-limit store unavailable: failing closed (503)", err)
			WriteUnavailable(w)
			return
		}
		m.logf(slog.LevelWarn, "httplimit: rate-limit store unavailable: failing open (request not limited)", err)
		next.ServeHTTP(w, r)
		return
	}
	d, q, t := &oneD, &one, 0
	if ds != nil {
		t = tightest(ds)
		d, q = &ds[t], &reqs[t]
	}
	ru := &m.rules[idx[t]]
	if !d.Allowed || !tighterSet(w.Header(), d, q.Limit) {
		SetHeaders(w.Header(), *d, ru.Name, q.Algorithm, q.Limit)
	}
	if !d.Allowed {
		m.deny(w, r, ru.Name, *d)
		return
	}
	delay := d.Delay
	for i := range ds {
		delay = max(delay, ds[i].Delay)
	}
	longest := delay
	if delay > 0 {
		// The slot leaves Delay after the decision: what the answer took
		// to come back (a round trip to Redis) is part of the wait, not
		// added to it.
		if took := m.rules[idx[0]].Limiter.Now().Sub(asked); took > 0 {
			delay = max(0, delay-took)
		}
	}
	if delay > 0 && ctxtime.Sleep(r.Context(), delay) != nil {
		// The client went away: its places in the queues are free.
		since := m.rules[idx[0]].Limiter.Now().Sub(asked)
		if ds == nil {
			m.giveBack(r.Context(), idx, []sluice.Request{one}, []sluice.Decision{oneD}, since)
		} else {
			m.giveBack(r.Context(), idx, reqs, ds, since)
		}
		if errors.Is(r.Context().Err(), context.Canceled) {
			writeGone(w)
		} else {
			// The request's own deadline passed first, its client
			// still there: the queue was longer than the request
			// allows, so it is told when its place would have left.
			writeDeadline(w, longest-since)
		}
		return
	}
	next.ServeHTTP(w, r)
}

func (m *middleware) limitOf(ru *rule, r *http.Request) (sluice.Limit, bool) {
	if ru.LimitFunc == nil {
		return sluice.Limit{}, false
	}
	return ru.LimitFunc(r)
}

// tightest returns the index of the decision whose figures the headers
// carry: the denying one with the longest RetryAfter (Never counts as the
// longest), else the lowest Remaining, ties going to the longest
// ResetAfter.
func tightest(ds []sluice.Decision) int {
	best := 0
	for i := 1; i < len(ds); i++ {
		if tighter(&ds[i], &ds[best]) {
			best = i
		}
	}
	return best
}

func tighter(a, b *sluice.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return wait(a) > wait(b)
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

func wait(d *sluice.Decision) time.Duration {
	if d.RetryAfter < 0 {
		return 1<<63 - 1
	}
	return d.RetryAfter
}

// logf logs err at most once a second.
func (m *middleware) logf(level slog.Level, msg string, err error) {
	now := time.Now().UnixNano()
	nx := m.next.Load()
	if now < nx || !m.next.CompareAndSwap(nx, now+int64(time.Second)) {
		m.dropped.Add(1)
		return
	}
	m.log.Log(context.Background(), level, msg, "err", err, "suppressed", m.dropped.Swap(0))
}

// invalid reports whether err is the limiter's refusal of an invalid
// request (a negative cost, an invalid per-request limit, a clock outside
// sluice.MinTime … sluice.MaxTime) rather than a store that could not
// decide.
func invalid(err error) bool {
	return errors.Is(err, sluice.ErrInvalidCost) || errors.Is(err, sluice.ErrInvalidLimit) || errors.Is(err, sluice.ErrInvalidTime)
}

// writeInvalid answers 500 for a request the limiter refused as invalid
// (see invalid): a bug in the caller, which must not pass as a store
// outage.
func writeInvalid(w http.ResponseWriter, err error) {
	body := `{"error":"invalid_limit"}` + "\n"
	switch {
	case errors.Is(err, sluice.ErrInvalidCost):
		body = `{"error":"invalid_cost"}` + "\n"
	case errors.Is(err, sluice.ErrInvalidTime):
		body = `{"error":"invalid_time"}` + "\n"
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(http.StatusInternalServerError)
	w.Write([]byte(body))
}

// WriteUnavailable answers 503 Service Unavailable with
// {"error":"store_unavailable"}: the limiter could not decide and the
// policy is to fail closed.
func WriteUnavailable(w http.ResponseWriter) {
	const body = `{"error":"store_unavailable"}` + "\n"
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte(body))
}
