package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Bounding a call by Options.Timeout
//
// context.WithTimeout on every call costs a timer, a context registered
// with its parent and a channel: ~1.5 µs of a decision that takes ~25. The
// calls of one instant share one deadline instead: a bucket, whose channel
// one timer closes, serves every call begun within the bucket's width
// (Timeout/16, at most 1ms) of its creation, so a call's bound is between
// Timeout minus the width and Timeout. A caller's own deadline, when it
// comes first (Envoy sends its 20ms), is used as it is. A caller cancelled
// before the call is refused at once, as before; one cancelled while Redis
// is answering waits for the answer or the bound, the Timeout.

type deadlineBucket struct {
	at   time.Time
	done chan struct{}
}

type deadlines struct {
	timeout, width time.Duration
	cur            atomic.Pointer[deadlineBucket]
	mu             sync.Mutex
}

func newDeadlines(timeout time.Duration) *deadlines {
	return &deadlines{timeout: timeout, width: max(min(timeout/16, time.Millisecond), time.Nanosecond)}
}

// bound returns ctx bounded by the timeout (ctx itself when its own
// deadline comes first). Nothing needs cancelling.
func (d *deadlines) bound(ctx context.Context) context.Context {
	w := d.waitBound(ctx)
	if w.b == nil {
		return ctx
	}
	return &boundCtx{Context: ctx, b: w.b}
}

// waitBound is bound's deadline, channel and error without a context
// (nothing allocated), for a caller that only waits.
type waitBound struct {
	ctx context.Context
	b   *deadlineBucket // nil: ctx's own deadline comes first
}

func (d *deadlines) waitBound(ctx context.Context) waitBound {
	end := time.Now().Add(d.timeout)
	if dl, ok := ctx.Deadline(); ok && !dl.After(end) {
		return waitBound{ctx: ctx}
	}
	b := d.cur.Load()
	if b == nil || b.at.Before(end.Add(-d.width)) {
		b = d.renew(end)
	}
	return waitBound{ctx: ctx, b: b}
}

func (w waitBound) deadline() time.Time {
	if w.b == nil {
		dl, _ := w.ctx.Deadline()
		return dl
	}
	return w.b.at
}

func (w waitBound) done() <-chan struct{} {
	if w.b == nil {
		return w.ctx.Done()
	}
	return w.b.done
}

func (w waitBound) err() error {
	if w.b == nil {
		return w.ctx.Err()
	}
	return (&boundCtx{Context: w.ctx, b: w.b}).Err()
}

func (d *deadlines) renew(end time.Time) *deadlineBucket {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.cur.Load(); b != nil && !b.at.Before(end.Add(-d.width)) {
		return b
	}
	b := &deadlineBucket{at: end, done: make(chan struct{})}
	time.AfterFunc(time.Until(end), func() { close(b.done) })
	d.cur.Store(b)
	return b
}

// boundCtx is a caller's context (values, and its error when it ends
// before the call) bounded by a shared deadline.
type boundCtx struct {
	context.Context
	b *deadlineBucket
}

func (c *boundCtx) Deadline() (time.Time, bool) { return c.b.at, true }
func (c *boundCtx) Done() <-chan struct{}       { return c.b.done }

func (c *boundCtx) Err() error {
	select {
	case <-c.b.done:
		return context.DeadlineExceeded
	default:
		return c.Context.Err()
	}
}
