package listener

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
)

// ErrBodyTimeout is the error of a request body read that got no data for
// the body read timeout. Check for it with errors.Is.
var ErrBodyTimeout = errors.New("request body stalled: no data within body_read_timeout")

// BodyTimeout wraps h so that a request body that sends nothing for d is
// cut: every read of the body may wait at most d for data, so a large
// upload that keeps moving is never cut, however long it takes in all.
// A cut body's read returns an error wrapping ErrBodyTimeout (and
// os.ErrDeadlineExceeded); the connection is closed after the answer,
// and the timeout is counted in m (nil: nowhere). If h answers without
// reading the body at all, the server's discarding of it is bounded the
// same way. d <= 0 returns h.
//
// On an HTTP/1 connection of a Listener served by Server (and without
// Expect: 100-continue), the wait is
// enforced where it happens: the connection sets its read deadline only
// before a read from the network made for the body, so a body that came
// in with its headers (a /v1/check) costs no deadline at all, and the
// deadline is lifted once the body has been read (net/http's background
// read, which watches for the client going away while the handler runs,
// is never cut by it). Elsewhere (HTTP/2, another listener) it is the
// read deadline of http.ResponseController, moved before each read of
// the body; a ResponseWriter that does not support it leaves the body
// unbounded.
func BodyTimeout(h http.Handler, d time.Duration, m *metrics.Listener) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || inMemory(r.Body) {
			h.ServeHTTP(w, r)
			return
		}
		// Expect: 100-continue keeps the path below: net/http treats a
		// body it wrapped for that by its type, which r.Body must keep.
		if c := connOf(r); c != nil && r.ProtoMajor == 1 && len(r.Header["Expect"]) == 0 {
			cb := &connBody{c: c, body: r.Body, m: m}
			orig := r.Body
			r.Body = cb // as http.MaxBytesReader's callers do; put back below
			c.bodyRead(d)
			h.ServeHTTP(w, r)
			r.Body = orig
			if !cb.done.Load() {
				// Unread: the server discards the rest after h, within d.
				c.bodyRead(0)
				c.SetReadDeadline(time.Now().Add(d))
			}
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) != nil {
			h.ServeHTTP(w, r)
			return
		}
		tb := &timedBody{rc: rc, d: d, body: r.Body, m: m}
		r2 := r.WithContext(context.WithValue(r.Context(), timedKey{}, tb))
		r2.Body = tb
		h.ServeHTTP(w, r2)
	})
}

// inMemory reports a body read whole before the handler (the fast
// HTTP/1.1 front's, package h1): no read of it can wait on the client.
func inMemory(b io.ReadCloser) bool {
	m, ok := b.(interface{ InMemory() bool })
	return ok && m.InMemory()
}

// connKey holds a request's *conn in its context (Server's ConnContext).
type connKey struct{}

// connOf returns the Listener connection r came on, or nil.
func connOf(r *http.Request) *conn {
	c, _ := r.Context().Value(connKey{}).(*conn)
	return c
}

// connContext is Server's http.Server.ConnContext: it puts the Listener
// connection (under TLS, the one beneath) in the context of its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = u.NetConn()
	}
	if lc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// connBody is a request body on an HTTP/1 Listener connection. From the
// start of the handler until the body has been read to its end, the
// connection arms its read deadline before each read from the network
// (conn.Read); at the end it lifts it, before net/http's background read
// could be cut by it. Reads of a body are not concurrent with each other,
// but a proxy's transport may still read after the handler returned.
type connBody struct {
	c    *conn
	body io.ReadCloser
	m    *metrics.Listener
	done atomic.Bool // read to the end (or failed): nothing left for the server to discard
}

func (b *connBody) Read(p []byte) (int, error) {
	if b.c.bodyCut.Load() {
		return 0, fmt.Errorf("%w: %w", ErrBodyTimeout, os.ErrDeadlineExceeded)
	}
	n, err := b.body.Read(p)
	if err == nil {
		return n, nil
	}
	b.done.Store(true)
	if err != io.EOF && isTimeout(err) {
		// The deadline stays in the past: the server's discarding of the
		// rest fails at once, and the connection is closed after the answer.
		b.c.bodyCut.Store(true)
		b.c.bodyRead(0)
		b.m.BodyTimeout()
		return n, fmt.Errorf("%w: %w", ErrBodyTimeout, err)
	}
	b.c.bodyRead(0)
	return n, err
}

func (b *connBody) Close() error { return b.body.Close() }

type timedKey struct{}

// TimedOut reports whether r's body (as BodyTimeout wrapped it) was cut
// for stalling. The proxy uses it to answer 408 rather than blame the
// upstream.
func TimedOut(r *http.Request) bool {
	if c := connOf(r); c != nil && c.bodyCut.Load() {
		return true
	}
	tb, _ := r.Context().Value(timedKey{}).(*timedBody)
	return tb != nil && tb.timedOut.Load()
}

// timedBody moves the read deadline d ahead before each read. Reads of a
// request body are not concurrent with each other, but the proxy's
// transport reads in its own goroutine while TimedOut may be asked from
// the handler's: timedOut is atomic.
type timedBody struct {
	rc       *http.ResponseController
	d        time.Duration
	body     io.ReadCloser
	m        *metrics.Listener
	timedOut atomic.Bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.timedOut.Load() {
		return 0, fmt.Errorf("%w: %w", ErrBodyTimeout, os.ErrDeadlineExceeded)
	}
	b.rc.SetReadDeadline(time.Now().Add(b.d))
	n, err := b.body.Read(p)
	if err != nil && isTimeout(err) {
		b.timedOut.Store(true)
		b.m.BodyTimeout()
		return n, fmt.Errorf("%w: %w", ErrBodyTimeout, err)
	}
	return n, err
}

func (b *timedBody) Close() error { return b.body.Close() }
