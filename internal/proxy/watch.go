package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/h1"
)

// Watching the client on the fast path. The h1 front does not watch a
// connection while its handler runs (that read per request is part of
// what it saves), so a client that goes away is noticed at the next write
// to it, and its upstream request held until the upstream sends
// something. The fast path watches (h1.Watch) only once a request is
// slow, as nginx watches its client between upstream reads: while it
// waits for the answer (awaitAnswer), and while the answer's body streams
// (streamFor) — both armed by the read deadline the request set at its
// start, so that the common quick answer pays nothing for them. On
// net/http's server (TLS), which watches its clients itself, the request's
// context ends when the client goes and the connection is aborted
// (fastForward's AfterFunc); the watch adds nothing there.

// WatchClientAfter is how long after a request's start the fast path
// starts watching its client, if the upstream's answer has not come whole
// by then (its head is awaited, or its body still streams): the h1 front
// does not watch a connection while its handler runs (that read per
// request is part of what it saves), so a client that gives up on a slow
// upstream, or leaves a stream (server-sent events, a download with
// pauses), would hold the upstream's request until response_header_timeout
// or the upstream's next bytes. After this long the request is no longer
// the common quick one, and a watch costs nothing that matters; a client
// gone then frees the upstream connection at once, as nginx closes its
// upstream request when its client goes.
const WatchClientAfter = time.Second

// firstWait is the read deadline the fast path sets for the first byte
// of an answer, from the request's start: WatchClientAfter where the
// client is to be watched after it, else response_header_timeout.
func (p *Proxy) firstWait() time.Duration {
	if p.rht > WatchClientAfter {
		return WatchClientAfter
	}
	return p.rht
}

// errClientGone ends a round trip whose client went away while the
// upstream had not answered (awaitAnswer).
var errClientGone = errors.New("proxy: the client went away before the upstream answered")

// awaitAnswer waits for the first byte of the upstream's answer on c
// (read into c.br, from which the answer is parsed). If WatchClientAfter
// passes first, it watches r's client (h1.Watch) while it waits on, until
// response_header_timeout from the request's start (now): a client that
// goes away then closes c and ends the round trip with errClientGone.
func (p *Proxy) awaitAnswer(c *upConn, r *http.Request, now time.Time) error {
	if p.firstWait() == p.rht || c.br.Buffered() > 0 {
		return nil // the parse's own reads wait, under rht
	}
	_, err := c.br.Peek(1)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return nil // the answer's first byte, or an error the parse meets again
	}
	ctx, stopWatch := h1.Watch(r.Context())
	defer stopWatch()
	stopAbort := context.AfterFunc(ctx, c.abort)
	watching()
	// The deadline of the rest of the wait; c.rdl is left zero, so that
	// the next request on c sets its own short one.
	c.rdl = time.Time{}
	c.setReadDeadline(now.Add(p.rht))
	_, err = c.br.Peek(1)
	if !stopAbort() && r.Context().Err() == nil {
		// The client went away (if r's context is done, the caller
		// sees that): c's deadline is past, its answer unread.
		return errClientGone
	}
	return nil // the answer's first byte, or an error the parse meets again
}

// streamFor is called when the body of the answer to the request whose
// context is ctx is still to come on c: its client is watched while the
// body streams, from the request's WatchClientAfter on (c.Read starts the
// watch when the deadline set at the request's start passes: no timer
// update or system call per request or per piece), or at once if the
// answer's head took longer than that (awaitAnswer lifted the deadline).
// Call endStream when the body is read.
func (c *upConn) streamFor(ctx context.Context) {
	c.client = ctx
	if c.rdl.IsZero() {
		c.watchClient()
	}
}

// watchClient watches c.client (h1.Watch) for the rest of the body: a
// client that goes away aborts c, whose reads then fail, so the upstream
// request ends (c is closed, not pooled). The body streams without a
// deadline from now on.
func (c *upConn) watchClient() {
	ctx, unwatch := h1.Watch(c.client)
	c.client = nil
	c.unabort = context.AfterFunc(ctx, c.abort)
	c.unwatch = unwatch
	c.rdl = time.Time{} // the next request on c sets its own deadline
	c.setReadDeadline(time.Time{})
	watching()
}

// endStream ends what streamFor started.
func (c *upConn) endStream() {
	c.client = nil
	if c.unwatch != nil {
		c.unabort() // first: unwatch cancels the watch's context
		c.unwatch()
		c.unabort, c.unwatch = nil, nil
	}
}

// testHookWatching, set by tests only (export_test.go), runs when the
// fast path starts watching a client (awaitAnswer, watchClient), so that
// a test can act while it is watched without waiting out
// WatchClientAfter by the clock.
var testHookWatching atomic.Pointer[func()]

func watching() {
	if f := testHookWatching.Load(); f != nil {
		(*f)()
	}
}
