// Package httplimit is rate limiting for net/http: a middleware that
// decides each request with a sluice.Limiter, sets the rate-limit response
// headers, and answers 429 with a JSON body when a request is over the
// limit. Its helpers (SetHeaders, WriteLimited) are what the sluice daemon
// itself sends, so library and daemon answers look the same.
//
// Every request the limit applies to gets these headers (see SetHeaders):
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
package httplimit

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clientip"
)

// ErrorPolicy says what the middleware does when the limiter's store cannot
// decide (sluice.ErrStoreUnavailable, a timeout).
type ErrorPolicy uint8

const (
	// FailOpen lets the request through, without rate-limit headers. It is
	// the zero value: an outage of the limiter does not become an outage of
	// the API.
	FailOpen ErrorPolicy = iota
	// FailClosed answers 503 Service Unavailable with
	// {"error":"store_unavailable"}.
	FailClosed
)

// Options configures Middleware. Limiter is required; every other field
// has a working zero value.
type Options struct {
	// Limiter decides the requests. Its limit, algorithm and store apply to
	// every key.
	Limiter *sluice.Limiter
	// Name names the limit in RateLimit-Policy, RateLimit and the 429
	// body's "rule"; "" means "default". It also prefixes every store key
	// (Name + ":" + key), so middlewares with different names can share a
	// store.
	Name string
	// KeyFunc returns the key a request is counted under; ok false means
	// the limit does not apply to it (it passes, without headers). nil
	// means KeyByRemoteIP.
	KeyFunc func(r *http.Request) (key string, ok bool)
	// Cost returns what a request costs (nil: 1). A negative cost is
	// treated as a store error.
	Cost func(r *http.Request) int64
	// OnError chooses between FailOpen (the zero value) and FailClosed.
	OnError ErrorPolicy
	// OnStoreError, if set, is called with each store error before OnError
	// applies: log or count it there.
	OnStoreError func(r *http.Request, err error)
	// DenyHandler, if set, writes the answer for a denied request in place
	// of WriteLimited. The rate-limit headers are already set.
	DenyHandler func(w http.ResponseWriter, r *http.Request, d sluice.Decision)
}

// Middleware returns net/http middleware that limits requests as opts say.
// For each request it calls the limiter once; an allowed request gets the
// rate-limit headers and goes to the next handler, after waiting out the
// decision's Delay when there is one (the leaky bucket is a shaper: admitted
// requests leave evenly spaced); a denied one gets the headers and the 429
// answer of WriteLimited and never reaches the next handler. If the
// client goes away during a Delay, the next handler is not called.
//
// It panics if opts.Limiter is nil.
func Middleware(opts Options) func(http.Handler) http.Handler {
	if opts.Limiter == nil {
		panic("httplimit: Middleware: nil Options.Limiter")
	}
	if opts.Name == "" {
		opts.Name = "default"
	}
	if opts.KeyFunc == nil {
		opts.KeyFunc = KeyByRemoteIP
	}
	prefix := opts.Name + ":"
	limit := opts.Limiter.Limit()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := opts.KeyFunc(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			cost := int64(1)
			if opts.Cost != nil {
				cost = opts.Cost(r)
			}
			d, err := opts.Limiter.AllowN(r.Context(), prefix+key, cost)
			if err != nil {
				if opts.OnStoreError != nil {
					opts.OnStoreError(r, err)
				}
				if opts.OnError == FailClosed {
					WriteUnavailable(w)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			SetHeaders(w.Header(), d, opts.Name, limit)
			if !d.Allowed {
				if opts.DenyHandler != nil {
					opts.DenyHandler(w, r, d)
				} else {
					WriteLimited(w, opts.Name, d)
				}
				return
			}
			if d.Delay > 0 && !sleep(r.Context(), d.Delay) {
				return
			}
			next.ServeHTTP(w, r)
		})
	}
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

// KeyByRemoteIP keys a request by the IP address of the connection
// (r.RemoteAddr without the port), as the daemon's ip key does: an IPv4
// client by its address, an IPv6 client by its /64 ("2001:db8:1:2::/64"),
// because one IPv6 host usually holds a whole /64 and could rotate through
// it; an IPv4-mapped IPv6 address counts as IPv4. It ignores
// X-Forwarded-For: behind a proxy, supply a KeyFunc that reads the client
// address the way your proxy sets it, trusting it only from the proxy.
func KeyByRemoteIP(r *http.Request) (string, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		if r.RemoteAddr == "" {
			return "", false
		}
		host = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return clientip.Prefixes{}.Key(a), true
	}
	return host, true
}

// sleep waits d, or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
