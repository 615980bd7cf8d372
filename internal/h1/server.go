// Package h1 is the fast HTTP/1.1 front of the reverse proxy and the
// decision API: an accept loop and one goroutine per connection that reads
// requests with a strict parser (parse.go) and serves those of the simple
// subset — GET or HEAD without a body, HTTP/1.1 or 1.0, and where
// Server.MaxBody allows, a POST whose small Content-Length body came whole
// with its head (body.go) — straight through the handler, in a
// keep-alive loop, pipelined requests in order. The first request outside
// that subset, or anything doubtful, hands the connection (the bytes read
// so far replayed first) to an unchanged net/http server, which serves it
// from then on: bodies, streaming uploads, upgrades and WebSocket,
// 100-continue, smuggling defences and every error answer stay net/http's.
//
// Why: under load the proxy spent most of its CPU in net/http's server
// (a goroutine and a read syscall per request to watch the connection, a
// context per request, the header map sorted and copied on write). On
// loopback with wrk (BENCHMARKS.md) the front serves the same requests
// with less CPU per request.
//
// What the front keeps of net/http's server: the http.Server's
// ReadHeaderTimeout (from the connection's first byte, and from the first
// byte of each next request), IdleTimeout between requests (0: none, as
// net/http with no ReadTimeout), ConnState (New, Active, Idle: the
// listener's slow-client accounting), ErrorLog for handler panics, the
// answer's framing (response.go), the request context's
// http.ServerContextKey and http.LocalAddrContextKey, and Shutdown and
// Close: the listener closes, idle connections close, requests in flight
// finish.
//
// What differs: a client that goes away while its request is in the
// handler is noticed when the answer is written (the write fails and the
// connection closes) or when the connection ends, not at once: the
// request context is the connection's, cancelled when it closes. net/http
// watches the connection with a read per request for that; the fast
// front does not pay it, except where a handler asks (Watch, watch.go).
//
// What handlers must not do, which net/http tolerates: keep the
// *http.Request, its URL or its Header map, or the ResponseWriter's
// Header map, after ServeHTTP returns (from a goroutine, say). The front
// reuses them for the connection's next request, as it reuses its
// buffers; the strings in them (header values, the path) are the
// request's own and may be kept, and a body kept stays closed. The
// daemon's handlers (the decision API, the proxy on both its paths,
// Watch, AfterFunc) use them within ServeHTTP only: httputil.ReverseProxy
// gives its Transport a Request.Clone, with its own URL and Header.
package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the fast front over a net/http server.
type Server struct {
	// MaxBody, if positive, lets the front serve POST requests with a
	// Content-Length body of at most MaxBody bytes itself, when the whole
	// body came in with its head (in the front's read buffer: at most
	// 8 KiB with the head). Any other body — chunked, announced by
	// Expect: 100-continue, two or a malformed Content-Length, larger,
	// or still on its way — is handed off to net/http as before. 0 (the
	// default): every request with a body is handed off. Set it before
	// Serve.
	MaxBody int64

	// BatchAnswers, if above 1, lets the front hold an answer in its
	// write buffer while the next pipelined request is already whole in
	// its read buffer, up to BatchAnswers answers (and the buffer's
	// 4 KiB), so that requests a client pipelines are answered with one
	// write instead of one each. An answer held waits for the next
	// request's handler: set it only where handlers answer quickly (the
	// decision API, not a proxy whose upstream may take its time), or
	// call Watch before a wait (it writes the held answers first). 0
	// (the default): every answer is written at once, as net/http does.
	// Set it before Serve.
	BatchAnswers int

	slow *http.Server
	fall *chanListener

	ctx    context.Context // the connections' contexts derive from it
	cancel context.CancelFunc

	closing atomic.Bool
	mu      sync.Mutex
	ln      net.Listener
	conns   map[*conn]struct{}
	drained chan struct{} // closed when the last connection ends after closing
}

// New returns the front over slow, whose Handler, ReadHeaderTimeout,
// IdleTimeout, ConnState and ErrorLog it uses; slow serves what the front
// hands off. Its other settings apply to the handed-off connections only.
func New(slow *http.Server) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{slow: slow, fall: newChanListener(), ctx: ctx, cancel: cancel, conns: map[*conn]struct{}{}}
}

// Serve accepts connections on ln until Shutdown or Close, serving the
// handed-off ones with the net/http server. It returns
// http.ErrServerClosed after those, else the listener's error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.fall.addr = ln.Addr()
	s.mu.Unlock()
	go s.slow.Serve(s.fall)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || temporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := &conn{s: s, nc: nc}
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			nc.Close()
			return http.ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.state(nc, http.StateNew)
		go c.serve()
	}
}

// temporary reports an Accept error net/http retries after (EMFILE and
// the like).
func temporary(err error) bool {
	te, ok := err.(interface{ Temporary() bool })
	return ok && te.Temporary()
}

// Shutdown stops accepting, closes idle connections and waits for the
// requests in flight (on both paths) until ctx is done, as
// http.Server.Shutdown does.
func (s *Server) Shutdown(ctx context.Context) error {
	slow := make(chan error, 1)
	go func() { slow <- s.slow.Shutdown(ctx) }()
	drained := s.stop()
	select {
	case <-drained:
	case <-ctx.Done():
		<-slow
		return ctx.Err()
	}
	return <-slow
}

// Close closes the listener and every connection at once, cancelling the
// requests in flight.
func (s *Server) Close() error {
	s.stop()
	err := s.slow.Close()
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
		c.fire()
	}
	s.mu.Unlock()
	return err
}

// stop marks the server closing, closes its listener and idle
// connections, and returns the channel closed when no connection is left.
func (s *Server) stop() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drained == nil {
		s.drained = make(chan struct{})
		s.closing.Store(true)
		if s.ln != nil {
			s.ln.Close()
		}
		if len(s.conns) == 0 {
			close(s.drained)
		}
	}
	for c := range s.conns {
		if c.idle.Load() {
			// Wakes its wait for a request; it sees closing and ends.
			c.nc.SetReadDeadline(time.Unix(1, 0))
		}
	}
	return s.drained
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if len(s.conns) == 0 && s.drained != nil {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
	s.mu.Unlock()
}

func (s *Server) state(nc net.Conn, st http.ConnState) {
	if s.slow.ConnState != nil {
		s.slow.ConnState(nc, st)
	}
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, maxHead) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

// conn is one connection on the fast front.
type conn struct {
	s        *Server
	nc       net.Conn
	in       connReader  // what br reads
	buffered func() int  // br.Buffered
	idle     atomic.Bool // waiting for the first byte of a request
	rq       request     // reused from request to request
	res      response    // reused from request to request
	bw       *bufio.Writer
	held     int // answers in bw not yet written (BatchAnswers)

	ctx      context.Context // the requests' context
	hookMu   sync.Mutex
	hook     func()      // set by AfterFunc (watch.go), run by Close
	stopHook func() bool // c.stop, bound once

	rdl     time.Time // the read deadline as setReadDeadline set it last
	rdlIdle bool      // rdl is an idle timeout's
}

func (c *conn) serve() {
	s := c.s
	// What net/http's server puts in a request's context, which handlers
	// go by (ReverseProxy aborts a cut answer only under a server).
	ctx := context.WithValue(s.ctx, http.ServerContextKey, s.slow)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.nc.LocalAddr())
	ctx, cancel := context.WithCancel(context.WithValue(ctx, connKey{}, c))
	c.ctx, c.stopHook = ctx, c.stop
	br, bw := readers.Get().(*bufio.Reader), writers.Get().(*bufio.Writer)
	c.in.nc = c.nc
	br.Reset(&c.in)
	c.buffered = br.Buffered
	bw.Reset(c.nc)
	handedOff := false
	c.bw = bw
	defer func() {
		cancel()
		s.forget(c)
		if !handedOff {
			if c.held > 0 {
				bw.Flush()
			}
			c.nc.Close()
			s.state(c.nc, http.StateClosed)
		}
		br.Reset(nil)
		bw.Reset(nil)
		readers.Put(br)
		writers.Put(bw)
	}()
	tmpl := (&http.Request{RemoteAddr: c.nc.RemoteAddr().String()}).WithContext(ctx)
	rht, idle := s.slow.ReadHeaderTimeout, s.slow.IdleTimeout
	var hdrDeadline time.Time
	if rht > 0 {
		hdrDeadline = time.Now().Add(rht)
		c.setReadDeadline(hdrDeadline, false)
	}
	for first := true; ; first = false {
		if br.Buffered() == 0 && !c.in.has {
			c.idle.Store(true)
			if s.closing.Load() {
				return
			}
			_, err := br.Peek(1)
			c.idle.Store(false)
			if err != nil {
				return
			}
		}
		buffered, _ := br.Peek(br.Buffered())
		end := headEnd(buffered, 0) // the head, when it is whole in the buffer already
		if !first && rht > 0 {
			// From the first byte of this request, as net/http; but a
			// head already whole in the buffer needs no more reads,
			// so no deadline (one timer update saved per request
			// under keep-alive load). A head with an LF without CR
			// (handed off) has one unless a CRLFCRLF follows.
			hdrDeadline = time.Time{}
			if end == 0 || end < 0 && !bytes.Contains(buffered, crlf2) {
				hdrDeadline = monoNow().Add(rht)
				c.setReadDeadline(hdrDeadline, false)
			}
		}
		var head []byte
		var handoff, partial bool
		var err error
		if end > 0 {
			head, partial = buffered[:end], true
		} else {
			head, handoff, partial, err = readHead(br)
		}
		if err != nil && (!partial || isTimeout(err)) {
			return // as net/http: a read error or timeout closes without an answer
		}
		var p parsed
		ok := false
		rq := &c.rq
		if err == nil && !handoff {
			p, ok = parse(head, rq, s.MaxBody)
			// A body must be here whole: the front never waits for one.
			ok = ok && int64(br.Buffered()-len(head)) >= p.length
		}
		if !ok {
			if c.held > 0 {
				bw.Flush() // the answers before this request go first
				c.held = 0
			}
			handedOff = c.handOff(br, hdrDeadline)
			return
		}
		var body []byte
		if p.length > 0 {
			// Still in br's buffer after the Discard: nothing reads br
			// until the handler has returned.
			buf, _ := br.Peek(len(head) + int(p.length))
			body = buf[len(head):]
		}
		br.Discard(len(head) + int(p.length))
		s.state(c.nc, http.StateActive)
		if s.closing.Load() {
			return // as net/http: a request read during shutdown is not served
		}
		// The read deadline stays: nothing reads the connection while
		// the handler runs.
		r := &rq.r
		*r = *tmpl
		r.Method, r.URL, r.RequestURI = p.method, p.url, p.target
		r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, p.minor
		if p.minor == 0 {
			r.Proto = "HTTP/1.0"
		}
		r.Header, r.Host, r.Close, r.Body = p.header, p.host, p.close, http.NoBody
		var rb *readBody
		if body != nil {
			rb = &readBody{b: body}
			r.Body, r.ContentLength = rb, p.length
		}
		w := &c.res
		w.reset(bw, r)
		handled := c.handle(w, r)
		if rb != nil {
			rb.Close() // its bytes are br's, which reads on
		}
		if !handled {
			bw.Flush() // what the handler wrote before it gave up, as net/http
			return
		}
		keep := w.finish()
		// The request and the answer's header maps are the next
		// request's: a handler keeps none of them after it returns.
		w.release()
		rq.release(p.lines)
		c.held++
		// Hold the answer if the next pipelined request is here whole
		// (BatchAnswers): it goes out with that one's.
		if !keep || c.held >= s.BatchAnswers || !headBuffered(br) {
			c.held = 0
			if bw.Flush() != nil || !keep {
				return
			}
		}
		s.state(c.nc, http.StateIdle)
		if br.Buffered() == 0 && !c.in.has {
			if idle > 0 {
				// Coarse: an idle deadline set less than idle/64 ago
				// stays, so under keep-alive load the timer is
				// updated about once per idle/64, not per request
				// (the connection may close up to that much early).
				if now := monoNow(); !c.rdlIdle || now.Add(idle).Sub(c.rdl) >= idle/64 {
					c.setReadDeadline(now.Add(idle), true)
				}
			} else if rht > 0 && !c.rdl.IsZero() {
				c.setReadDeadline(time.Time{}, false)
			}
		}
	}
}

var crlf2 = []byte("\r\n\r\n")

// headBuffered reports whether br holds the whole head of a next request.
func headBuffered(br *bufio.Reader) bool {
	if br.Buffered() == 0 {
		return false
	}
	buf, _ := br.Peek(br.Buffered())
	return bytes.Contains(buf, crlf2)
}

// monoStart anchors monoNow.
var monoStart = time.Now()

// monoNow is time.Now from one reading of the monotonic clock instead of
// two (wall and monotonic): its wall time drifts from the system's if
// that is adjusted, which deadlines and durations, its only uses, do not
// see: they compare monotonic readings.
func monoNow() time.Time { return monoStart.Add(time.Since(monoStart)) }

// setReadDeadline sets the connection's read deadline to t, remembering
// it (idle: as the idle timeout's). Code that sets it otherwise (Watch)
// calls forgetReadDeadline.
func (c *conn) setReadDeadline(t time.Time, idle bool) {
	c.rdl, c.rdlIdle = t, idle
	c.nc.SetReadDeadline(t)
}

// forgetReadDeadline: the deadline was set behind setReadDeadline's back.
func (c *conn) forgetReadDeadline() { c.rdl, c.rdlIdle = time.Unix(1, 0), false }

// handle runs the handler; false: it panicked (http.ErrAbortHandler: on
// purpose), the connection is to close.
func (c *conn) handle(w *response, r *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.logf("http: panic serving %v: %v\n%s", r.RemoteAddr, v, buf)
			}
		}
	}()
	c.s.slow.Handler.ServeHTTP(w, r)
	return true
}

func (c *conn) logf(format string, args ...any) {
	if l := c.s.slow.ErrorLog; l != nil {
		l.Printf(format, args...)
	} else {
		fmt.Printf(format+"\n", args...)
	}
}

// handOff gives the connection to net/http with the bytes buffered in br
// read first; its header timeout keeps the deadline the front had set
// (hdr, zero: none), so a slow client gets no second allowance. false:
// net/http is shutting down and the connection was closed.
func (c *conn) handOff(br *bufio.Reader, hdr time.Time) bool {
	buffered, _ := br.Peek(br.Buffered())
	rc := &replayConn{Conn: c.nc, buf: append([]byte(nil), buffered...), hdr: hdr}
	c.nc.SetReadDeadline(time.Time{})
	return c.s.fall.give(rc)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
