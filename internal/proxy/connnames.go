package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/textproto"
	"sync"
	"time"
)

// headNames reads the Connection header lines of HTTP/1 response heads
// from the bytes of an upstream connection as they are read (feed), so
// that the headers they name can be dropped (RFC 9110 §7.6.1) even when
// http.ReadResponse, which net/http's Transport and the fast path's
// fallback read heads with, has deleted the Connection header first: it
// does so when the header says close, and in Connection: close, X-Foo the
// X-Foo would then pass to the client. It is started (start) where a
// head begins; after a 1xx other than 101 it reads the next head too;
// after the final head it stops, so that no body is read as a head.
type headNames struct {
	on     bool
	st     uint8
	match  int    // bytes of "connection" matched (stName)
	status []byte // the status line's first bytes (stStatus)
	val    []byte // the Connection value being read (stValue)
	inConn bool   // the last header line was a Connection line (for obs-fold)
	cur    seenHead
	heads  []seenHead
	next   int // heads before it were taken (interim, final)
}

// seenHead is one head's status code and Connection values.
type seenHead struct {
	code int
	conn []string
}

const (
	stStatus = iota // in the status line
	stLine          // at the start of a header line
	stName          // in a header name that may be Connection
	stValue         // in a Connection value
	stSkip          // in any other header line
	stCR            // after a CR at the start of a line
)

// start readies n for a head beginning with the next byte fed.
func (n *headNames) start() {
	*n = headNames{on: true, status: n.status[:0], val: n.val[:0], heads: n.heads[:0]}
}

// stop ends the reading.
func (n *headNames) stop() { n.on = false }

// feed reads p, the next bytes of the connection.
func (n *headNames) feed(p []byte) {
	for i := 0; i < len(p) && n.on; i++ {
		c := p[i]
		switch n.st {
		case stStatus:
			if c == '\n' {
				n.cur = seenHead{code: statusCode(n.status)}
				n.st = stLine
			} else if len(n.status) < len("HTTP/1.1 200") {
				n.status = append(n.status, c)
			}
		case stLine:
			switch {
			case c == '\r':
				n.st = stCR
			case c == '\n':
				n.endHead()
			case (c == ' ' || c == '\t') && n.inConn && len(n.cur.conn) > 0:
				// obs-fold: the line continues the Connection value
				// before it, as textproto joins them.
				last := len(n.cur.conn) - 1
				n.val = append(n.val[:0], n.cur.conn[last]...)
				n.val = append(n.val, ' ')
				n.cur.conn = n.cur.conn[:last]
				n.st = stValue
			case lower(c) == "connection"[0]:
				n.match, n.st = 1, stName
			default:
				n.inConn, n.st = false, stSkip
			}
		case stCR:
			if c == '\n' {
				n.endHead()
			} else {
				n.inConn, n.st = false, stSkip
			}
		case stName:
			switch {
			case n.match == len("connection") && c == ':':
				n.val, n.st = n.val[:0], stValue
			case n.match < len("connection") && lower(c) == "connection"[n.match]:
				n.match++
			case c == '\n':
				n.inConn, n.st = false, stLine
			default:
				n.inConn, n.st = false, stSkip
			}
		case stValue:
			if c != '\n' {
				n.val = append(n.val, c)
				break
			}
			v := n.val
			if len(v) > 0 && v[len(v)-1] == '\r' {
				v = v[:len(v)-1]
			}
			n.cur.conn = append(n.cur.conn, textproto.TrimString(string(v)))
			n.inConn, n.st = true, stLine
		case stSkip:
			if c == '\n' {
				n.st = stLine
			}
		}
	}
}

// endHead records the head just read; a 1xx other than 101 is followed
// by another.
func (n *headNames) endHead() {
	n.heads = append(n.heads, n.cur)
	n.cur, n.inConn, n.st = seenHead{}, false, stStatus
	n.status = n.status[:0]
	if n.heads[len(n.heads)-1].code < 100 || n.heads[len(n.heads)-1].code > 199 || n.heads[len(n.heads)-1].code == 101 {
		n.on = false
	}
}

// take returns the Connection values of the next head read with the
// status code (interim answers the Transport does not pass on are
// skipped); ok false: none was read (another reader's answer, an HTTP/2
// one).
func (n *headNames) take(code int) (conn []string, ok bool) {
	for n.next < len(n.heads) {
		h := n.heads[n.next]
		n.next++
		if h.code == code {
			return h.conn, true
		}
	}
	return nil, false
}

func statusCode(line []byte) int {
	if len(line) < len("HTTP/1.1 200") || string(line[:5]) != "HTTP/" {
		return 0
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0
		}
		code = code*10 + int(c-'0')
	}
	return code
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// sniffConn is an HTTP/1 connection of the proxy's Transport to the
// upstream (sniffTransport): the response heads of the request it carries
// are read by the request's headNames (forwardInfo), which the request
// sets when the Transport picks the connection (the trace's GotConn:
// watch).
type sniffConn struct {
	net.Conn
	mu    sync.Mutex // watch (the request's goroutine) against Read (the Transport's read loop)
	names *headNames
}

// watch has the next response heads read into names.
func (c *sniffConn) watch(names *headNames) {
	c.mu.Lock()
	names.start()
	c.names = names
	c.mu.Unlock()
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.names != nil {
			c.names.feed(p[:n])
			if !c.names.on {
				c.names = nil
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

// sniffTransport has t's HTTP/1 connections to the upstream be
// sniffConns: over TCP to an http:// upstream; over TLS to an https://
// one unless it picks HTTP/2 (ALPN), whose answers carry no Connection
// header. t then dials TLS itself, as the Transport would: the server
// name is the upstream's host unless o.TLSClientConfig names one, the
// handshake bounded by t.TLSHandshakeTimeout; a connection that is not a
// *tls.Conn gives its answers no Response.TLS, which nothing reads.
func sniffTransport(t *http.Transport, o Options) {
	d := &net.Dialer{Timeout: dialTimeout(o), KeepAlive: 30 * time.Second}
	if o.Upstream.Scheme == "http" {
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &sniffConn{Conn: c}, nil
		}
		return
	}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := o.TLSClientConfig.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		if cfg.NextProtos == nil {
			cfg.NextProtos = []string{"h2", "http/1.1"}
		}
		tc := tls.Client(c, cfg)
		hctx, cancel := context.WithTimeout(ctx, t.TLSHandshakeTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			c.Close()
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return tc, nil // the Transport's HTTP/2 takes a *tls.Conn
		}
		return &sniffConn{Conn: tc}, nil
	}
}
