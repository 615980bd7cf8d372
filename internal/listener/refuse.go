package listener

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// AnswerRefused has l answer a connection beyond its cap with a 503
// ({"error":"overloaded"}, Retry-After: 1, as an HTTP/2 request over the
// cap is answered) before closing it, rather than closing it at once;
// and returns l. On a plaintext listener the answer is HTTP/1.1; under
// TLS (TLS, which wraps l) the handshake is done first, with the
// listener's own configuration, and the answer is HTTP/2 if the client
// chose it (each request it sends, until the connection's graceful end:
// refuseH2), HTTP/1.1 otherwise. A gateway asking the decision API
// (nginx's auth_request, Caddy's forward_auth) takes a closed connection
// for Sluice down, which its fail-open configs let through unlimited:
// clients that fill the cap with requests a delay rule holds would pass
// every request after them. An answer is Sluice's word, which those
// configs refuse. At most maxRefusing connections are being answered at
// once, each for up to refuseWait from its accept, its TLS handshake
// included; beyond that they are closed at once, as before.
func (l *Listener) AnswerRefused() *Listener {
	l.answer = true
	return l
}

// TLS returns a TLS listener over l with cfg, and has the connections
// refused beyond the cap (AnswerRefused) answered over TLS with cfg too:
// a client whose handshake the listener would refuse (no certificate its
// client CA signed, say) is refused it there as well, and gets nothing.
// Call it before serving.
func (l *Listener) TLS(cfg *tls.Config) net.Listener {
	l.tls = cfg
	return tls.NewListener(l, cfg)
}

const (
	// maxRefusing bounds the refused connections being answered at once.
	// Their TLS handshakes, the only costly part of an answer, are
	// bounded by it too.
	maxRefusing = 256
	// refuseWait bounds the time a refused connection is held: for its
	// TLS handshake, to read the request's head (the answer waits for
	// it: Go's transport drops an answer that comes before its request
	// as unsolicited), and to take what else the client sends before the
	// close (closing with unread bytes resets the connection, and the
	// client may lose the answer).
	refuseWait = time.Second
	// refuseHead bounds the head read before answering (on HTTP/2, all
	// that is read: the client's preface, settings and requests), and
	// what is taken after it: what a served connection takes of a
	// request's head (net/http's 1 MiB, and the 4 KiB it allows past it;
	// Caddy's forward_auth passes on that much), with room for HTTP/2's
	// framing. Cut shorter, a refused request with a long head (long
	// cookies a gateway forwards) got its connection closed or reset, not
	// the answer, and a fail-open gateway let it through. It is read
	// through a small buffer, never held: HTTP/2's decoded header list
	// is bounded apart (h2RefuserBase).
	refuseHead = http.DefaultMaxHeaderBytes + 64<<10
)

// overloadedBody is the body of the 503 a request over the cap gets, on
// HTTP/1.1 (overloaded) and HTTP/2 alike.
const overloadedBody = `{"error":"overloaded"}` + "\n"

var overloaded = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n" +
	"Content-Length: " + strconv.Itoa(len(overloadedBody)) + "\r\nConnection: close\r\n\r\n" + overloadedBody)

// writeOverloaded answers an HTTP/2 request over the cap.
func writeOverloaded(w http.ResponseWriter) {
	hd := w.Header()
	hd["Content-Type"] = []string{"application/json"}
	hd["Retry-After"] = []string{"1"}
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, overloadedBody)
}

// refuse answers c 503 once its request's head has come (or refuseWait
// has passed, or refuseHead bytes), then closes it. Under TLS it
// completes the handshake first, within the same refuseWait.
func (l *Listener) refuse(c net.Conn) {
	defer l.refusing.Add(-1)
	defer c.Close()
	start := time.Now()
	c.SetDeadline(start.Add(l.refuseWait))
	if l.tls != nil {
		tc := tls.Server(c, l.tls)
		if tc.Handshake() != nil {
			return
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			refuseH2(tc, start, l.refuseWait)
			return
		}
		c = tc
	}
	readHead(c)
	if _, err := c.Write(overloaded); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(c, refuseHead))
}

// readHead reads from c up to the end of a request's head (an empty line,
// "\r\n\r\n" or "\n\n" as net/http takes it), refuseHead bytes, or an
// error (the deadline), through a buffer of 4 KiB.
func readHead(c net.Conn) {
	var buf [4 << 10]byte
	nl := 0 // 1: a line just ended ("\n"); 2: and a "\r" came after it
	for n := 0; n < refuseHead; {
		m, err := c.Read(buf[:min(len(buf), refuseHead-n)])
		n += m
		for _, b := range buf[:m] {
			switch {
			case b == '\n' && nl > 0:
				return
			case b == '\n':
				nl = 1
			case b == '\r' && nl == 1:
				nl = 2
			default:
				nl = 0
			}
		}
		if err != nil {
			return
		}
	}
}

// newH2Refuser returns the HTTP/2 server of one refused connection,
// whose GOAWAY its returned func starts (at once; once is enough, more
// do nothing): x/net's http2 starts a connection's graceful end only
// through the http.Server it was configured on, so each refused
// connection has its own pair. It reads frames of 16 KiB at most
// (refusedConn passes on refuseHead bytes, but a frame's buffer is sized
// by its header first) and grants no flow-control window beyond
// HTTP/2's first 64 KiB: the bodies are never read. Its HTTP/1 side logs
// nowhere: its line for each client that goes away unusually would be
// the client's to write, one a connection. Its header bound is a served
// connection's (net/http's default), and bounds what a refused
// connection's decoded header lists hold, however compressed they came.
// (x/net's http2 over Go 1.27's net/http serves a ServeConn given a
// BaseConfig through a copy of it, which base.Shutdown would not reach:
// TestRefusedH2Steady and TestRefusedH2ManyLongRequests fail if no GOAWAY
// comes.)
func newH2Refuser() (*http2.Server, *http.Server, func()) {
	h2 := &http2.Server{
		MaxReadFrameSize:             16 << 10,
		MaxUploadBufferPerConnection: 65535,
		MaxUploadBufferPerStream:     65535,
	}
	base := &http.Server{ErrorLog: log.New(io.Discard, "", 0), MaxHeaderBytes: http.DefaultMaxHeaderBytes}
	if err := http2.ConfigureServer(base, h2); err != nil {
		panic(err) // it fails only on a TLS configuration, which base has none of
	}
	var once sync.Once
	return h2, base, func() { once.Do(func() { base.Shutdown(context.Background()) }) }
}

// refuseH2 serves tc, whose client chose HTTP/2, answering each of its
// requests 503 overloaded as it comes, until the connection's graceful
// end: its GOAWAY, sent once half of wait from start (its accept) has
// passed or refuseHead bytes have been read (past them, what the client
// sends is dropped: refusedConn), names the last request it answers, and
// the client sends the later ones over a new connection. The other half
// of wait is for the requests the client sent before the GOAWAY reached
// it to be answered; the deadline on the connection under tc ends it
// then at the latest, or the client's close sooner. Before, the first
// answer sent the GOAWAY: Go's HTTP/2 client (a gateway's: Caddy's) sent
// every request it had sent after that again over a new connection,
// refused the same way, and again after a second, two, four...
func refuseH2(tc *tls.Conn, start time.Time, wait time.Duration) {
	h2, base, goAway := newH2Refuser()
	c := &refusedConn{Conn: tc, left: refuseHead, goAwayAt: start.Add(wait / 2), goAway: goAway}
	h2.ServeConn(c, &http2.ServeConnOpts{
		BaseConfig: base,
		Handler:    http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeOverloaded(w) }),
	})
	c.arm.Do(func() {}) // no timer armed after this, and the one armed (if any) seen
	if c.timer != nil {
		c.timer.Stop()
	}
}

// refusedConn is a refused TLS connection served HTTP/2: after left
// bytes, what the client sends is read and dropped, unseen by HTTP/2,
// until it closes the connection or the deadline set before the
// handshake, which stays in force, ends it. Ending the reads there
// instead closed the connection under the requests whose answers were
// still to be written, which a gateway multiplexing many requests with
// long heads (Caddy) took for Sluice down; a request the server never
// saw is one its GOAWAY tells the client to send again. The GOAWAY is
// started (goAway) when the dropping starts, every frame read before
// then handled (HTTP/2 reads the next frame only once it has handled
// the last), and at goAwayAt by a timer armed at the first read: by
// then HTTP/2 serves the connection, and a GOAWAY started before would
// be lost.
type refusedConn struct {
	*tls.Conn // its ConnectionState tells HTTP/2 it runs over TLS
	left      int
	goAwayAt  time.Time
	goAway    func()
	arm       sync.Once
	timer     *time.Timer
}

func (c *refusedConn) Read(b []byte) (int, error) {
	c.arm.Do(func() { c.timer = time.AfterFunc(time.Until(c.goAwayAt), c.goAway) })
	if c.left <= 0 {
		c.goAway()
		for {
			if _, err := c.Conn.Read(b); err != nil {
				return 0, err
			}
		}
	}
	if len(b) > c.left {
		b = b[:c.left]
	}
	n, err := c.Conn.Read(b)
	c.left -= n
	return n, err
}

func (c *refusedConn) SetDeadline(time.Time) error      { return nil }
func (c *refusedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *refusedConn) SetWriteDeadline(time.Time) error { return nil }
