package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// refundTimeout bounds the giving back of a leaky bucket place whose
// client went away: the request's context has ended, so the refund runs on
// one of its own, with the request's values.
const refundTimeout = time.Second

// giveBack gives back to a store with sluice.Refunder the leaky bucket
// places of an admitted request whose client went away while it waited
// out its Delay, since after the decision: nobody will leave in them, and
// the next requests take them. A place whose time has come is kept
// (its Delay not over since), and so are the other rules' counts. reqs[i]
// and ds[i] are the request and decision of rule idx[i]. On a store
// without Refunder, or if the refund fails, the places stay taken.
func (m *middleware) giveBack(ctx context.Context, idx []int, reqs []sluice.Request, ds []sluice.Decision, since time.Duration) {
	rf, ok := m.store.(sluice.Refunder)
	if !ok {
		return
	}
	var rctx context.Context
	for i := range reqs {
		q, d := reqs[i], &ds[i]
		if q.Algorithm != sluice.LeakyBucket || q.Cost <= 0 || q.Force || !d.Allowed || d.Delay <= since {
			continue
		}
		if rctx == nil {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
			defer cancel()
		}
		q.Now = m.rules[idx[i]].Limiter.Now()
		_, _ = rf.Refund(rctx, q)
	}
}

// StatusClientClosedRequest (499, nginx's "client closed request") is the
// status the middleware writes for a request whose client went away before
// it was decided or while it waited out its Delay: the next handler never
// ran. Nobody reads the answer (a client that only half-closed its
// connection may); it is for the logging and metrics middleware wrapped
// around this one, which would otherwise record the 200 net/http writes
// for a handler that wrote nothing.
const StatusClientClosedRequest = 499

// writeGone answers 499 with no body for a request whose client went away,
// without the rate-limit headers: a request gone during its Delay gave its
// leaky bucket places back, so the figures set before the wait no longer
// hold.
func writeGone(w http.ResponseWriter) {
	h := w.Header()
	for _, k := range [...]string{keyLimit, keyRemaining, keyReset, keyPolicy, keyRateLimit, keyRetryAfter, keyXRetryAfter} {
		delete(h, k)
	}
	w.WriteHeader(StatusClientClosedRequest)
}

// writeDeadline answers 503 Service Unavailable for an admitted request
// whose own deadline (not its client) ended its Delay before its place in
// the queue left: Retry-After (whole seconds, rounded up, at least 1) is
// the rest of its wait, left the time its place would have left, and the
// body {"error":"deadline_exceeded","retry_after_ms":N}. As for a client
// gone, the rate-limit headers are removed: its places were given back.
func writeDeadline(w http.ResponseWriter, left time.Duration) {
	h := w.Header()
	for _, k := range [...]string{keyLimit, keyRemaining, keyReset, keyPolicy, keyRateLimit, keyRetryAfter, keyXRetryAfter} {
		delete(h, k)
	}
	var buf [64]byte
	b := append(buf[:0], `{"error":"deadline_exceeded","retry_after_ms":`...)
	b = strconv.AppendInt(b, max(ceilDiv(left, time.Millisecond), 1), 10)
	b = append(b, "}\n"...)
	h[keyRetryAfter] = []string{strconv.FormatInt(max(ceilSeconds(left), 1), 10)}
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(b)
}
