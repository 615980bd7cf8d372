package h1

import (
	"context"
	"net"
	"time"
)

// The front does not watch a connection while its request is in the
// handler (server.go: that read per request is part of what it saves).
// A handler about to wait long for nothing but time — the proxy holding a
// request under action: delay — asks for it with Watch, so that a client
// that goes away meanwhile ends the wait as on net/http.

type connKey struct{}

// Watch returns a context derived from ctx that is cancelled if the
// client of the request (served by the front) closes or resets its
// connection, and the function that stops watching; call it before
// answering. Outside the front, or with pipelined bytes already waiting,
// it returns ctx (net/http watches on its own, on HTTP/1 once the
// request's body has been read to its end). On the front it first
// writes the answers held for this request (Server.BatchAnswers), so that
// they do not wait out its wait.
func Watch(ctx context.Context) (context.Context, func()) {
	c, _ := ctx.Value(connKey{}).(*conn)
	if c == nil {
		return ctx, func() {}
	}
	if c.held > 0 {
		// Answers held for this request (BatchAnswers) go now: they
		// must not wait out its wait.
		c.bw.Flush()
		c.held = 0
	}
	if c.in.has || c.buffered() > 0 {
		return ctx, func() {}
	}
	// The header deadline the front leaves while the handler runs would
	// end the watch of a request held past it (a delay longer than
	// read_header_timeout) and count the client slow: lifted, as net/http
	// lifts it once the head is read. stop ends the read; the front sets
	// the next deadline.
	c.forgetReadDeadline()
	c.nc.SetReadDeadline(time.Time{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		n, err := c.nc.Read(b[:])
		if n > 0 {
			c.in.b, c.in.has = b[0], true // the next request's first byte
		}
		if n == 0 && err != nil && !isTimeout(err) {
			cancel() // EOF or reset: the client is gone
		}
	}()
	return wctx, func() {
		c.nc.SetReadDeadline(time.Unix(1, 0)) // ends the read, if still waiting
		<-done
		c.nc.SetReadDeadline(time.Time{}) // the front sets the next one
		cancel()
	}
}

// connReader is what the front's bufio.Reader reads: the connection,
// after a byte Watch read ahead.
type connReader struct {
	nc  net.Conn
	b   byte
	has bool
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.has && len(p) > 0 {
		p[0], r.has = r.b, false
		return 1, nil
	}
	return r.nc.Read(p)
}

// AfterFunc is context.AfterFunc without its allocations and locks for
// the context of a request the front serves (r.Context() as the front
// made it): that context ends only when the server is closed (Close)
// while the request is in its handler, so f is kept on the connection
// and run then, in its own goroutine; stop returns true if it stopped f
// from running. One function per connection at a time: call stop before
// the next AfterFunc. Any other context gets context.AfterFunc.
func AfterFunc(ctx context.Context, f func()) (stop func() bool) {
	c, _ := ctx.Value(connKey{}).(*conn)
	if c == nil || ctx != c.ctx {
		return context.AfterFunc(ctx, f)
	}
	c.hookMu.Lock()
	c.hook = f
	c.hookMu.Unlock()
	if ctx.Err() != nil {
		c.fire() // closed meanwhile: Close may have looked before f was set
	}
	return c.stopHook
}

// fire runs the function AfterFunc set, if any, once.
func (c *conn) fire() {
	c.hookMu.Lock()
	f := c.hook
	c.hook = nil
	c.hookMu.Unlock()
	if f != nil {
		go f()
	}
}

// stop is what AfterFunc returns: true if the function was still to run.
func (c *conn) stop() bool {
	c.hookMu.Lock()
	defer c.hookMu.Unlock()
	if c.hook == nil {
		return false
	}
	c.hook = nil
	return true
}
