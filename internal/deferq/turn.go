package deferq

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// One turn of a held entry: the checks in Redis (begin.lua), the rule's
// limit, the send to the upstream, and the outcome recorded (finish.lua).

// turn is one attempt at entry e: check it may go, ask the rule's limit,
// send it, record the outcome.
func (w *worker) turn(ctx context.Context, e *entry) result {
	o := &w.q.o
	c := o.Connect()
	keys := []string{w.base + "q", w.base + "s:" + e.id, w.base + "k:" + keyDigest(e.key), w.base + "dead"}
	if e.unrecorded == nil && w.q.upstream.Load() == nil {
		return result{e: e, after: time.Second} // no proxy (yet): hold it
	}
	if e.unrecorded == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		verdict, err := beginScript.Exec(rctx, c, []string{keys[0], keys[1], keys[2], w.base + "i"}, []string{group, w.consumer, e.sid, e.id,
			strconv.FormatInt(queuedTTL.Milliseconds(), 10), strconv.FormatInt(o.ClaimIdle.Milliseconds(), 10)}).ToString()
		cancel()
		o.Logger.Debug("defer: turn", "rule", w.name, "id", e.id, "verdict", verdict, "err", err)
		switch {
		case err != nil:
			return result{e: e, after: time.Second}
		case verdict == "final" || verdict == "lost":
			return result{e: e, drop: true}
		case verdict == "wait":
			return result{e: e, after: 250 * time.Millisecond}
		case strings.HasPrefix(verdict, "wait:"):
			return w.claimHead(ctx, e, strings.TrimPrefix(verdict, "wait:"))
		case strings.HasPrefix(verdict, "later:"):
			ms, _ := strconv.ParseInt(strings.TrimPrefix(verdict, "later:"), 10, 64)
			return result{e: e, after: max(time.Duration(ms)*time.Millisecond, time.Millisecond)}
		}
		r := w.rule.Load()
		if n := int64(len(e.body)); n > r.MaxBody() {
			// Held since before a reload lowered the bound.
			if w.overBound(ctx, e, n) {
				return result{e: e, drop: true}
			}
			return result{e: e, after: time.Second}
		}
		if r.Take != nil {
			d, err := r.Take(ctx, append([]string{e.key}, e.also...))
			o.Logger.Debug("defer: rate", "rule", w.name, "id", e.id, "allowed", d.Allowed, "retry_after", d.RetryAfter, "err", err)
			if err != nil {
				return result{e: e, after: time.Second}
			}
			if !d.Allowed {
				after := d.RetryAfter
				if after < 0 || after > time.Minute {
					after = time.Minute
				}
				return result{e: e, after: max(after, time.Millisecond)}
			}
		}
		if ctx.Err() != nil {
			return result{e: e, after: time.Second} // stopping: start no send
		}
		e.unrecorded = w.deliver(ctx, e)
		e.unrecorded.send = randHex(8)
	}
	out := e.unrecorded
	state, err := w.record(ctx, e, out)
	if err != nil {
		o.Logger.Warn("defer: record outcome", "rule", w.name, "id", e.id, "err", err)
		return result{e: e, after: time.Second} // record it next turn; never send again
	}
	e.unrecorded = nil
	o.Logger.Debug("defer: recorded", "rule", w.name, "id", e.id, "state", state)
	if wait, ok := strings.CutPrefix(state, "failed:"); ok {
		// The back-off of the attempts counted in Redis (finish.lua).
		w.q.m.retried(w.name)
		n, _ := strconv.ParseInt(wait, 10, 64)
		return result{e: e, after: max(time.Duration(n)*time.Millisecond, time.Millisecond)}
	}
	switch state {
	case "delivered":
		w.q.m.delivered(w.name, out.status)
		return result{e: e, drop: true}
	case "dead_lettered":
		w.q.m.deadLettered(w.name)
		if w.q.deadLog.OK(o.Now()) { // one a second: an upstream down dead-letters at the rule's rate
			o.Logger.Warn("defer: dead-lettered", "rule", w.name, "id", e.id, "status", out.status, "err", out.err, "suppressed", w.q.deadLog.Dropped())
		}
		return result{e: e, drop: true}
	}
	return result{e: e, drop: true}
}

// record records out, the outcome of a send of e, in Redis (finish.lua)
// and returns the state recorded: "delivered", "failed:N" (retry in N ms),
// "dead_lettered", or "lost" (e is no longer pending: Redis lost its data;
// nothing recorded, and e is let go).
func (w *worker) record(ctx context.Context, e *entry, out *outcome) (string, error) {
	o := &w.q.o
	keys := []string{w.base + "q", w.base + "s:" + e.id, w.base + "k:" + keyDigest(e.key), w.base + "dead", w.base + "i"}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	return finishScript.Exec(rctx, o.Connect(), keys, []string{group, e.sid, e.id, out.state, strconv.Itoa(out.status), out.err,
		strconv.Itoa(o.MaxAttempts), ms(o.StatusTTL), ms(max(o.Backoff, time.Millisecond)),
		w.deadLetters(), out.send, ms(max(o.MaxBackoff, time.Millisecond)), ms(max(out.retry, 0))}).ToString()
}

// deliver sends e to the upstream once. A send begun runs to its end,
// bounded by DeliveryTimeout, even when the worker stops: cut off, the
// upstream may have it while the attempt is recorded as failed (and on the
// last attempt dead-lettered).
func (w *worker) deliver(ctx context.Context, e *entry) *outcome {
	o := &w.q.o
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.DeliveryTimeout)
	defer cancel()
	req, err := w.request(ctx, e)
	if err != nil {
		// It will not build next time either: the retries run out and it is
		// dead-lettered with this error.
		return &outcome{state: "failed", err: err.Error()}
	}
	resp, err := o.Transport.RoundTrip(req)
	if err != nil {
		return &outcome{state: "failed", err: err.Error()}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		out := &outcome{state: "failed", status: resp.StatusCode, err: resp.Status}
		// Retry-After as seconds or an HTTP date, else the RateLimit
		// field's reset, as the library's retrying client reads them.
		if wait, ok := httplimit.ServerWait(resp.Header, time.Now()); ok && wait > 0 {
			out.retry = wait
		}
		return out
	}
	return &outcome{state: "delivered", status: resp.StatusCode}
}

func (w *worker) request(ctx context.Context, e *entry) (*http.Request, error) {
	u, err := url.ParseRequestURI(e.uri)
	if err != nil {
		return nil, fmt.Errorf("replay %s: uri %q: %w", e.id, e.uri, err)
	}
	up := w.q.upstream.Load()
	if up == nil {
		return nil, fmt.Errorf("replay %s: no upstream", e.id)
	}
	target := *up
	target.Path, target.RawPath = joinPath(up, u)
	target.RawQuery = u.RawQuery
	var h http.Header
	if err := json.Unmarshal([]byte(e.header), &h); err != nil {
		return nil, fmt.Errorf("replay %s: headers: %w", e.id, err)
	}
	req, err := http.NewRequestWithContext(ctx, e.method, target.String(), strings.NewReader(e.body))
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", e.id, err)
	}
	if h == nil {
		h = http.Header{}
	}
	dropHop(h) // Enqueue dropped them; a request queued by an older version may hold some
	if h.Get("Idempotency-Key") == "" {
		h.Set("Idempotency-Key", e.id)
	}
	h.Set("Sluice-Deferred-Id", e.id)
	req.Header = h
	req.ContentLength = int64(len(e.body))
	if len(e.body) == 0 {
		req.Body = http.NoBody
	}
	return req, nil
}

// joinPath joins the upstream's base path and the request's path as the
// proxy does.
func joinPath(up, u *url.URL) (path, rawpath string) {
	if up.Path == "" || up.Path == "/" {
		return u.Path, u.RawPath
	}
	a, b := strings.TrimSuffix(up.EscapedPath(), "/"), u.EscapedPath()
	if !strings.HasPrefix(b, "/") {
		b = "/" + b
	}
	p, err := url.PathUnescape(a + b)
	if err != nil {
		return up.Path + u.Path, ""
	}
	return p, a + b
}
