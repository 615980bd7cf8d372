// Package listener keeps slow and numerous clients from holding an HTTP
// listener of the daemon (the decision API and the proxy):
//
//   - Listener caps the client connections held at once (max_connections):
//     a connection accepted beyond the cap is closed at once, or answered
//     503 first (AnswerRefused), and counted, so the ones already held
//     keep being served. An HTTP/2 request in
//     flight beyond the first on its connection holds a place too
//     (capStreams): one more is answered 503.
//   - BodyTimeout bounds the wait between two reads of a request body
//     (body_read_timeout, as nginx's client_body_timeout): a body that
//     stalls is cut and its connection closed, while a large upload that
//     keeps moving is never cut, however long it takes.
//   - Server builds the http.Server with the header and idle timeouts and
//     both of the above wired in, and closes an HTTP/1 connection after a
//     request whose framing another hop may have read another way (a
//     chunked body, which may have come with a Content-Length; HTTP/1.0
//     keep-alive, whose Transfer-Encoding net/http ignores), so that no
//     request can be smuggled after it.
//   - Wrap alone serves a listener net/http does not (the gRPC one): the
//     cap, the accounting, and send_timeout's bound on the writes.
//
// Connections closed because the client was too slow (its headers did not
// arrive within read_header_timeout, its body stalled, or it took nothing
// of a write for send_timeout) are counted, as are connections open and
// refused (package metrics).
package listener

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rawio"
)

// Listener is a net.Listener that holds at most Max connections at once
// and tracks each connection's HTTP state to tell slow clients from idle
// ones. Set its ConnState method as the http.Server's ConnState (Server
// does).
type Listener struct {
	net.Listener
	max     int64        // 0: no cap
	open    atomic.Int64 // places held: connections, and HTTP/2 requests beyond one per connection (capStreams)
	metrics *metrics.Listener
	send    time.Duration // send_timeout of the connections accepted; 0: none
	user    time.Duration // TCP_USER_TIMEOUT of the connections accepted; 0: the system's

	mu       sync.Mutex
	hijacked map[*conn]struct{} // taken over from the server and open (see CloseHijacked)

	answer   bool         // answer a connection beyond the cap 503 (AnswerRefused)
	tls      *tls.Config  // the TLS over l (TLS), for those answers; nil: plaintext
	refusing atomic.Int64 // refused connections being answered

	// The bounds of those answers: maxRefusing and refuseWait (tests set
	// others, before serving).
	maxRefusing int64
	refuseWait  time.Duration
}

// Wrap returns ln capped at max connections (0: no cap), its
// connections' writes bounded by send (send_timeout, see conn.Write; 0:
// no bound), counting into m (nil: nowhere).
func Wrap(ln net.Listener, max int, send time.Duration, m *metrics.Listener) *Listener {
	return &Listener{Listener: ln, max: int64(max), send: send, metrics: m, maxRefusing: maxRefusing, refuseWait: refuseWait}
}

// WithUserTimeout sets TCP_USER_TIMEOUT to d on the TCP connections l
// accepts (Linux; elsewhere nothing), and returns l; call it before
// serving. grpc-go sets its keepalive timeout so on the connections it
// accepts, but only from a bare TCP listener: behind l it sees none, so
// the gRPC listener sets it here.
func (l *Listener) WithUserTimeout(d time.Duration) *Listener {
	l.user = d
	return l
}

// UserTimeout returns the TCP_USER_TIMEOUT WithUserTimeout set (0: none).
func (l *Listener) UserTimeout() time.Duration { return l.user }

// SendTimeout returns the send timeout of the connections accepted.
func (l *Listener) SendTimeout() time.Duration { return l.send }

// Open returns the places held now: the connections, and the HTTP/2
// requests in flight beyond the first on each connection.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Accept returns the next connection, closing (and counting) at once any
// connection beyond the cap, or answering it 503 first (AnswerRefused).
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.take() {
			l.metrics.Refused()
			if l.answer && l.refusing.Add(1) <= l.maxRefusing {
				go l.refuse(c)
				continue
			} else if l.answer {
				l.refusing.Add(-1)
			}
			c.Close()
			continue
		}
		l.metrics.Opened()
		if l.user > 0 {
			// Best effort: a socket that refuses the option is still
			// served, with the kernel's own retransmission bound.
			_ = setUserTimeout(c, l.user)
		}
		return &conn{Conn: rawio.Wrap(c), l: l, sendWait: l.send}, nil
	}
}

// ConnState records the HTTP state of a connection Accept returned; set
// it as http.Server.ConnState.
func (l *Listener) ConnState(c net.Conn, s http.ConnState) {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = u.NetConn()
	}
	if tc, ok := c.(*conn); ok {
		tc.state.Store(int32(s))
		if s == http.StateHijacked {
			l.mu.Lock()
			tc.hijacked.Store(true)
			if !tc.closed.Load() {
				if l.hijacked == nil {
					l.hijacked = map[*conn]struct{}{}
				}
				l.hijacked[tc] = struct{}{}
			}
			l.mu.Unlock()
		}
	}
}

// CloseHijacked closes the connections that a handler took over from the
// server (http.Hijacker: a proxied WebSocket or other upgrade) and that
// are still open. http.Server.Shutdown and Close leave those alone, so
// call it once they have returned: a tunnel would otherwise go on being
// relayed after the server has stopped.
func (l *Listener) CloseHijacked() {
	l.mu.Lock()
	cs := make([]*conn, 0, len(l.hijacked))
	for c := range l.hijacked {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// conn is an accepted connection that counts itself out when closed and
// notices when a read timed out while the client owed the server data.
type conn struct {
	net.Conn
	l     *Listener
	state atomic.Int32 // http.ConnState
	// slow is set when a read timed out on a deadline in the future of
	// the abort deadlines net/http uses, while the connection was not
	// idle between requests: headers or a body that did not come in time.
	slow      atomic.Bool
	abort     atomic.Bool // the read deadline in force is an abort (in the past)
	closeOnce sync.Once
	closed    atomic.Bool // released (see release)
	hijacked  atomic.Bool // in l.hijacked

	// The body read timeout (BodyTimeout, connBody): while a request
	// body is being read, bodyWait is the timeout, and Read arms the read
	// deadline before each read from the network. bodyMu orders the arming
	// with its lifting: net/http starts its background read from inside
	// the body's last read, in another goroutine.
	bodyOn   atomic.Bool // bodyWait > 0: Read must look
	bodyMu   sync.Mutex
	bodyWait time.Duration
	bodyArm  bool        // a deadline was armed since bodyRead(d)
	bodyCut  atomic.Bool // a body read timed out: the connection is done

	// sendWait is send_timeout: the longest a Write may go without
	// progress (0: no bound). userW: a write deadline set by a caller
	// (crypto/tls before its close_notify, grpc-go around its handshake)
	// is in force, and Write leaves it alone.
	sendWait time.Duration
	userW    atomic.Bool

	h2 h2Streams // HTTP/2 requests in flight (capStreams)
}

// bodyRead starts (d > 0) or ends (0) the reading of a request body; at
// the end, a read deadline armed for it is lifted, unless the body was
// cut.
func (c *conn) bodyRead(d time.Duration) {
	c.bodyMu.Lock()
	defer c.bodyMu.Unlock()
	c.bodyWait = d
	c.bodyOn.Store(d > 0)
	if d == 0 && c.bodyArm {
		c.bodyArm = false
		if !c.bodyCut.Load() {
			c.SetReadDeadline(time.Time{})
		}
	}
}

// longAgo: net/http aborts a pending read by setting a deadline in the
// past (time.Unix(1, 0)); a deadline before this is such an abort.
var longAgo = time.Unix(1_000_000, 0)

func (c *conn) SetReadDeadline(t time.Time) error {
	c.abort.Store(!t.IsZero() && t.Before(longAgo))
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the write deadline too: while one is in force, Write
// leaves it alone (userW). grpc-go bounds a new connection's handshake so
// (its connection timeout), then lifts the deadline.
func (c *conn) SetDeadline(t time.Time) error {
	c.abort.Store(!t.IsZero() && t.Before(longAgo))
	c.userW.Store(!t.IsZero())
	return c.Conn.SetDeadline(t)
}

func (c *conn) Read(b []byte) (int, error) {
	if c.bodyOn.Load() {
		c.bodyMu.Lock()
		if c.bodyWait > 0 {
			c.SetReadDeadline(time.Now().Add(c.bodyWait))
			c.bodyArm = true
		}
		c.bodyMu.Unlock()
	}
	n, err := c.Conn.Read(b)
	// abort first: net/http ends every request's background read with an
	// abort deadline, and isTimeout allocates.
	if err != nil && !c.abort.Load() && isTimeout(err) && http.ConnState(c.state.Load()) != http.StateIdle {
		c.slow.Store(true)
	}
	return n, err
}

// CloseWrite half-closes the connection when the one under it can
// (errors.ErrUnsupported otherwise): ReverseProxy passes an upstream's
// end of an upgraded connection on to the client so, and net/http does
// before closing after some error answers.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Close gives the connection's slot back, then closes it: the other way
// round, a client that saw the close and connected again at once could
// find the slot still taken and be refused.
func (c *conn) Close() error {
	c.release()
	return c.Conn.Close()
}

// release gives the connection's slot back, once.
func (c *conn) release() {
	c.closeOnce.Do(func() {
		c.l.open.Add(-1)
		c.l.metrics.Closed(c.slow.Load())
		// Only a hijacked connection takes the lock (see ConnState: each
		// side stores its flag, then reads the other's).
		c.closed.Store(true)
		if c.hijacked.Load() {
			c.l.mu.Lock()
			delete(c.l.hijacked, c)
			c.l.mu.Unlock()
		}
	})
}

// SetWriteDeadline gives the slot back when crypto/tls is about to send
// its close_notify alert (from tls.Conn's Close or CloseWrite, which set
// a write deadline first): on TLS the client sees the close at the
// alert, before the socket closes, so that is the moment Close stands
// for on a plain connection. Nothing else sets a write deadline on the
// listener's connections more than once per connection (no WriteTimeout),
// so looking at the callers here costs little.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && inCloseNotify() {
		c.release()
	}
	c.userW.Store(!t.IsZero())
	return c.Conn.SetWriteDeadline(t)
}

// rawWriter is a connection that can write what its socket takes at once,
// and wait for room for some (rawio.Conn).
type rawWriter interface {
	WriteNow(p []byte) (int, error)
	WriteSome(p []byte) (int, error)
}

// Write writes b, failing with a timeout when the client takes nothing of
// it for sendWait (send_timeout, as nginx's send_timeout: the bound is on
// the wait between two writes that make progress, so a slow reader that
// keeps reading is never cut). The connection is then counted slow. With
// raw I/O the write is first tried without a deadline, and only a write
// that finds the socket's buffer full arms one (then again after each
// progress), so an answer the buffer takes at once costs nothing more.
// On other connections (not Linux TCP) a deadline is armed for each
// Write and again while it progresses: a stalled client is cut after
// between one and two sendWaits.
func (c *conn) Write(b []byte) (int, error) {
	if c.sendWait <= 0 || c.userW.Load() {
		return c.Conn.Write(b)
	}
	rw, ok := c.Conn.(rawWriter)
	if !ok {
		return c.writeWaiting(b)
	}
	n, err := rw.WriteNow(b)
	if err != nil || n == len(b) {
		return n, err
	}
	defer c.Conn.SetWriteDeadline(time.Time{}) // see writeWaiting
	for n < len(b) {
		c.Conn.SetWriteDeadline(time.Now().Add(c.sendWait))
		m, err := rw.WriteSome(b[n:])
		n += m
		if err != nil {
			return n, c.sendFailed(err)
		}
	}
	return n, nil
}

// writeWaiting writes b with each Write's wait bounded by sendWait,
// waiting again while the client takes some; it lifts the deadline
// after, since a deadline left to pass would fail a later write at once,
// even one the socket could take.
func (c *conn) writeWaiting(b []byte) (int, error) {
	defer c.Conn.SetWriteDeadline(time.Time{})
	n := 0
	for {
		c.Conn.SetWriteDeadline(time.Now().Add(c.sendWait))
		m, err := c.Conn.Write(b[n:])
		n += m
		if err == nil || m > 0 && isTimeout(err) && n < len(b) {
			if err == nil {
				return n, nil
			}
			continue // the client took some: wait again
		}
		return n, c.sendFailed(err)
	}
}

// sendFailed closes the connection, counted slow, when err is
// send_timeout's: it is done, and the server over it may not close it
// (grpc-go leaves a connection whose writes failed for its reader to
// close, and the reader of a client that goes on sending never fails).
func (c *conn) sendFailed(err error) error {
	if isTimeout(err) {
		c.slow.Store(true)
		c.Close()
	}
	return err
}

// inCloseNotify reports whether SetWriteDeadline was called from
// crypto/tls's close_notify (through tls.Conn.SetWriteDeadline).
func inCloseNotify() bool {
	var pcs [4]uintptr
	n := runtime.Callers(3, pcs[:]) // above inCloseNotify and SetWriteDeadline
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == "crypto/tls.(*Conn).closeNotify" {
			return true
		}
		if !more {
			return false
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
