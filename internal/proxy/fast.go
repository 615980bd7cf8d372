package proxy

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/hop"
)

// The fast path forwards the common request — GET or HEAD with no body,
// no Upgrade, to an http:// upstream — in the handler's own goroutine:
// the request is written straight from the incoming one onto a pooled
// HTTP/1.1 connection (one write), the response read (by
// readSimpleResponse when it is of the common kind, else
// http.ReadResponse) and its headers put into the ResponseWriter's map.
// httputil.ReverseProxy with net/http's Transport spends most of its CPU
// around that — an outgoing Request and Header copy per request, and the
// Transport's two goroutines per connection with a hand-off through
// channels at each request (BENCHMARKS.md, the proxy's profile). Every
// other request (bodies, which must stream while the upstream may answer
// early; Upgrades; https upstreams) goes through ReverseProxy. What the
// client and the upstream see is the same on both paths; the tests of
// package proxy run each behaviour on the path that serves it.

// fastPath reports whether r takes the fast path.
func (p *Proxy) fastPath(r *http.Request) bool {
	if p.pool == nil || r.ProtoMajor != 1 {
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if r.ContentLength != 0 || (r.Body != nil && r.Body != http.NoBody) || len(r.TransferEncoding) > 0 {
		return false
	}
	if _, ok := r.Header["Upgrade"]; ok {
		return false
	}
	return cleanQuery(r.URL.RawQuery) && r.URL.Path != "" && r.URL.Path[0] == '/'
}

// cleanQuery reports whether ReverseProxy would leave q as it is (it
// re-encodes a query with ';' or a malformed escape).
func cleanQuery(q string) bool {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !ishex(q[i+1]) || !ishex(q[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// requestURI is the request line's target for r at the upstream: its path
// joined to the upstream's base path, as ReverseProxy's SetURL does.
func (p *Proxy) requestURI(r *http.Request) string {
	up := p.o.Upstream
	if up.Path == "" || up.Path == "/" && up.RawPath == "" {
		return r.URL.RequestURI()
	}
	u := *r.URL
	u.Path, u.RawPath = joinURLPath(up, r.URL)
	return u.RequestURI()
}

// joinURLPath is net/http/httputil's.
func joinURLPath(a, b *url.URL) (path, rawpath string) {
	if a.RawPath == "" && b.RawPath == "" {
		return singleJoiningSlash(a.Path, b.Path), ""
	}
	apath, bpath := a.EscapedPath(), b.EscapedPath()
	aslash, bslash := strings.HasSuffix(apath, "/"), strings.HasPrefix(bpath, "/")
	switch {
	case aslash && bslash:
		return a.Path + b.Path[1:], apath + bpath[1:]
	case !aslash && !bslash:
		return a.Path + "/" + b.Path, apath + "/" + bpath
	}
	return a.Path + b.Path, apath + bpath
}

func singleJoiningSlash(a, b string) string {
	aslash, bslash := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/")
	switch {
	case aslash && bslash:
		return a + b[1:]
	case !aslash && !bslash:
		return a + "/" + b
	}
	return a + b
}

// writeRequest writes r as the upstream is to see it onto c's buffer.
func (p *Proxy) writeRequest(c *upConn, r *http.Request, ip netip.Addr) {
	bw := c.bw
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(p.requestURI(r))
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	if p.o.PreserveHost && r.Host != "" {
		bw.WriteString(r.Host)
	} else { // an HTTP/1.0 request may come without a Host
		bw.WriteString(p.o.Upstream.Host)
	}
	bw.WriteString("\r\n")
	conn := hop.NewNames(r.Header["Connection"])
	var trust peerTrust
	// Header names and values were checked by net/http's server (no
	// CR, LF or NUL), so they are written as they came.
	for k, vv := range r.Header {
		if dropRequestHeader(k, conn) || clientIPHeader(k) && !trust.passes(p, r) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if te := r.Header["Te"]; len(te) > 0 && tokenIn(te, "trailers") {
		bw.WriteString("Te: trailers\r\n")
	}
	if ip.IsValid() {
		bw.WriteString("X-Forwarded-For: ")
		bw.Write(ip.AppendTo(bw.AvailableBuffer())) // no allocation
		bw.WriteString("\r\nX-Real-Ip: ")
		bw.Write(ip.AppendTo(bw.AvailableBuffer()))
		bw.WriteString("\r\n")
	}
	f := p.forwarded(r, &trust)
	if f.port != "" {
		bw.WriteString("X-Forwarded-Port: ")
		bw.WriteString(f.port)
		bw.WriteString("\r\n")
	}
	bw.WriteString("X-Forwarded-Host: ")
	bw.WriteString(f.host)
	bw.WriteString("\r\nX-Forwarded-Proto: ")
	bw.WriteString(f.proto)
	bw.WriteString("\r\nForwarded: ")
	bw.Write(appendForwarded(bw.AvailableBuffer(), ip, f.host, f.proto)) // no allocation
	bw.WriteString("\r\n\r\n")
}

func tokenIn(vv []string, tok string) bool {
	for _, v := range vv {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(f), tok) {
				return true
			}
		}
	}
	return false
}

// fastForward forwards r on the fast path; res (nil: no rule applied) is
// the decision whose headers the response carries. It reports whether r's
// client went away before the answer came (answered 499).
func (p *Proxy) fastForward(w http.ResponseWriter, r *http.Request, ip netip.Addr, res *engine.Result) (gone bool) {
	ctx := r.Context()
	now := monoNow() // the one clock reading of the request: pool, deadline
	var (
		c    *upConn
		resp *http.Response
		stop func() bool
		err  error
	)
	// A connection from the pool may have been closed by the upstream
	// while idle: a GET or HEAD that failed on one before any byte of an
	// answer is sent again once, on a new connection.
	for attempt := 0; ; attempt++ {
		var reused bool
		c, reused, err = p.pool.get(ctx, now)
		if err != nil {
			break
		}
		// The client going away (on the h1 front: the server closing)
		// unblocks the connection's reads and writes; the connection is
		// then closed, not pooled.
		stop = h1.AfterFunc(ctx, c.abort)
		resp, err = p.roundTrip(w, c, r, ip, now)
		if err == nil {
			break
		}
		stop()
		c.nc.Close()
		if !reused || attempt > 0 || ctx.Err() != nil || !retryable(err) {
			break
		}
	}
	if errors.Is(err, errClientGone) {
		// Nobody is likely to read it (a client that only half-closed
		// its connection does), but the access log around the proxy
		// records 499, as on the other paths, not nothing.
		writeGone(w)
		return true
	}
	if err != nil {
		return p.fail(w, r, res, err)
	}
	h := w.Header()
	conn := hop.NewNames(resp.Header["Connection"])
	for k, vv := range resp.Header {
		if hop.Is(k) || conn.Has(k) {
			continue
		}
		h[k] = vv
	}
	untyped(h, resp.Header)
	if res != nil {
		res.SetHeaders(h)
	}
	limits := res != nil && res.SetsHeaders()
	if len(resp.Trailer) > 0 {
		dropTrailers(resp.Trailer, conn, limits) // those it declares (trailers.go)
	}
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	eof, err := copyBody(w, resp)
	c.endStream()
	reuse := eof && err == nil && stop() && !resp.Close && c.br.Buffered() == 0 && !c.aborted.Load()
	if !eof || err != nil {
		stop()
	}
	// resp may be c's own: nothing of it is read once c is pooled.
	trailer := resp.Trailer
	if len(trailer) > 0 {
		dropTrailers(trailer, conn, limits) // all it sent, declared or not
	}
	if reuse {
		p.pool.put(c, now)
	} else {
		c.nc.Close()
	}
	if err != nil {
		// Part of the answer is out: all that can be done is cut it,
		// so the client sees it incomplete (as ReverseProxy does).
		panic(http.ErrAbortHandler)
	}
	if len(trailer) > 0 {
		http.NewResponseController(w).Flush()
		if len(trailer) == announced {
			for k, vv := range trailer {
				h[k] = vv
			}
			return false
		}
		for k, vv := range trailer {
			h[http.TrailerPrefix+k] = vv
		}
	}
	return false
}

// roundTrip sends r on c and reads the response's head: 1xx answers
// (103 Early Hints) are relayed to w as ReverseProxy does.
func (p *Proxy) roundTrip(w http.ResponseWriter, c *upConn, r *http.Request, ip netip.Addr, now time.Time) (*http.Response, error) {
	c.hold = c.raw != nil && c.warm // sent by the first read (pool.go)
	p.writeRequest(c, r, ip)
	err := c.bw.Flush()
	c.hold = false
	if err != nil {
		return nil, err
	}
	if d := p.firstWait(); d > 0 {
		// Coarse: a deadline set less than d/64 ago for the previous
		// answer stays (the timer is updated about once per d/64 under
		// load, not per request; the timeout may come up to that much
		// early).
		if want := now.Add(d); c.rdl.IsZero() || want.Sub(c.rdl) >= d/64 {
			c.rdl = want
			c.setReadDeadline(want)
		}
	}
	c.lim = p.maxHeader
	defer func() { c.lim = -1 }()
	if p.firstWait() < p.rht {
		c.awaitFor(r, now.Add(p.rht))
	}
	resp, err := p.readAnswer(w, c, r)
	if c.endAwait(r) {
		return nil, errClientGone
	}
	if err != nil {
		return nil, err
	}
	if p.rht > 0 && resp.Body != http.NoBody && (resp.ContentLength < 0 || int64(c.br.Buffered()) < resp.ContentLength) {
		// The body is still to come: it streams without a
		// deadline, its client watched once the request is
		// WatchClientAfter old (watch.go). (A body already in the
		// buffer needs no read; the next request on c sets its
		// own deadline.)
		c.streamFor(r.Context())
	}
	return resp, nil
}

// readAnswer reads the head of the answer to r on c: 1xx answers (103
// Early Hints) are relayed to w as ReverseProxy does, but to an HTTP/1.0
// client, which knows none (RFC 9110 §15.2), up to their bound
// (informational.go). The heads http.ReadResponse
// reads have their Connection lines read by c.names, since it deletes a
// Connection header that says close: the headers it names are dropped all
// the same (resp.Header["Connection"] is put back).
func (p *Proxy) readAnswer(w http.ResponseWriter, c *upConn, r *http.Request) (*http.Response, error) {
	defer func() { c.sniff = false }()
	var inf informational
	for {
		var resp *http.Response
		simple := false
		var err error
		if r.Method == http.MethodGet {
			simple, err = readSimpleResponse(c.br, &c.resp, c.hdr, &c.strs)
		}
		if simple {
			resp = &c.resp
			// The body is read to its end before c goes back to the
			// pool: c's own lenBody serves.
			c.body = lenBody{br: c.br, n: resp.ContentLength}
			resp.Request, resp.Body = r, &c.body
		} else if err == nil {
			if !c.sniff {
				// The head starts at the reader's position: what is
				// buffered of it is read now, the rest as it comes.
				c.names.start()
				b, _ := c.br.Peek(c.br.Buffered())
				c.names.feed(b)
				c.sniff = true
			}
			resp, err = http.ReadResponse(c.br, r)
			if err == nil {
				if conn, ok := c.names.take(resp.StatusCode); ok && len(conn) > 0 {
					resp.Header["Connection"] = conn
				}
			}
		}
		if errors.Is(err, errHeaderTooLarge) {
			return nil, fmt.Errorf("proxy: upstream response headers over %d bytes", p.maxHeader)
		}
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode < 100:
			return nil, errBadStatus(resp.StatusCode)
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("proxy: upstream answered 101 Switching Protocols to a request without Upgrade")
		case resp.StatusCode < 200:
			if err := inf.add(resp.Header); err != nil {
				return nil, err
			}
			if r.ProtoAtLeast(1, 1) {
				h := w.Header()
				conn := hop.NewNames(resp.Header["Connection"])
				for k, vv := range resp.Header {
					if !hop.Is(k) && !conn.Has(k) {
						h[k] = vv
					}
				}
				w.WriteHeader(resp.StatusCode)
				clear(h)
			}
			c.lim = p.maxHeader
			continue
		}
		return resp, nil
	}
}

// errBadStatus is the error of an upstream answer whose status is below
// 100 (http.ReadResponse takes any three digits), which no ResponseWriter
// can write: 502, as for any answer that cannot be relayed.
func errBadStatus(code int) error {
	return fmt.Errorf("proxy: upstream answered status %03d, not an HTTP status", code)
}

// copyBody copies resp's body to w, flushing each piece of a stream (a
// body of unknown length, or server-sent events) as it arrives; eof
// reports that the body was read to its end.
func copyBody(w http.ResponseWriter, resp *http.Response) (eof bool, err error) {
	flush := resp.ContentLength == -1
	if !flush {
		if ct := resp.Header["Content-Type"]; len(ct) > 0 && strings.HasPrefix(ct[0], "text/event-stream") {
			if mt, _, _ := mime.ParseMediaType(ct[0]); mt == "text/event-stream" {
				flush = true
			}
		}
	}
	if lb, ok := resp.Body.(*lenBody); ok && !flush && lb.n <= int64(lb.br.Buffered()) {
		// The whole body came with the head (the common small answer):
		// written from the connection's buffer, without a copy buffer.
		b, _ := lb.br.Peek(int(lb.n))
		lb.br.Discard(len(b))
		lb.n = 0
		if _, werr := w.Write(b); werr != nil {
			return false, nil // the client went away: nothing to cut
		}
		return true, nil
	}
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := *bp
	var rc *http.ResponseController
	if flush {
		rc = http.NewResponseController(w)
	}
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false, nil // the client went away: nothing to cut
			}
			if flush {
				rc.Flush()
			}
		}
		if rerr == io.EOF {
			return true, nil
		}
		if rerr != nil {
			return false, rerr
		}
	}
}

// monoStart anchors monoNow.
var monoStart = time.Now()

// monoNow is time.Now from one reading of the monotonic clock instead of
// two (wall and monotonic): its wall time drifts from the system's if
// that is adjusted, which deadlines and durations, its only uses, do not
// see: they compare monotonic readings.
func monoNow() time.Time { return monoStart.Add(time.Since(monoStart)) }

// retryable: errors of a connection the upstream closed while it was idle
// in the pool, seen before any byte of a response.
func retryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
