package proxy

import (
	"context"
	"errors"
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
// waits for the answer's head (awaitFor), and while the answer's body streams
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
// upstream had not answered (awaitFor).
var errClientGone = errors.New("proxy: the client went away before the upstream answered")

// awaitFor is called before the head of the answer to r is read on c,
// under the short deadline firstWait set at r's start: if that passes
// before the head is whole (the upstream is slow to answer, or sent a 103
// Early Hints or part of its head at once and the rest later), c.Read
// calls awaitClient, which watches r's client while the head is awaited
// on until until (response_header_timeout from r's start). Call endAwait
// once the head is read or failed.
func (c *upConn) awaitFor(r *http.Request, until time.Time) {
	c.await, c.awaitUntil = r, until
}

// awaitClient watches the client of c.await (h1.Watch) for the rest of
// the wait for its answer's head: a client that goes away aborts c, whose
// read then fails (endAwait reports it).
func (c *upConn) awaitClient() {
	ctx, unwatch := h1.Watch(c.await.Context())
	c.await = nil
	c.unabortHead = context.AfterFunc(ctx, c.abort)
	c.unwatchHead = unwatch
	// c.rdl is left zero, so that the next request on c sets its own
	// short deadline.
	c.rdl = time.Time{}
	c.setReadDeadline(c.awaitUntil)
	watching()
}

// endAwait ends what awaitFor started; gone reports that r's client went
// away while its answer's head was awaited (c's deadline is then past, the
// answer unread; if r's context is done, the caller sees that instead).
func (c *upConn) endAwait(r *http.Request) (gone bool) {
	c.await = nil
	if c.unwatchHead == nil {
		return false
	}
	gone = !c.unabortHead() && r.Context().Err() == nil
	c.unwatchHead()
	c.unabortHead, c.unwatchHead = nil, nil
	return gone
}

// streamFor is called when the body of the answer to the request whose
// context is ctx is still to come on c: its client is watched while the
// body streams, from the request's WatchClientAfter on (c.Read starts the
// watch when the deadline set at the request's start passes: no timer
// update or system call per request or per piece), or at once if the
// answer's head took longer than that (awaitClient lifted the deadline).
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
// fast path starts watching a client (awaitClient, watchClient), so that
// a test can act while it is watched without waiting out
// WatchClientAfter by the clock.
var testHookWatching atomic.Pointer[func()]

func watching() {
	if f := testHookWatching.Load(); f != nil {
		(*f)()
	}
}
