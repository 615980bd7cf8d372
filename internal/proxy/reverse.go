package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/textproto"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/hop"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/rules"
)

// The ReverseProxy path (forward): what the proxy knows of the request
// (forwardInfo), the client's ResponseWriter as ReverseProxy writes to it
// (relayWriter), and ReverseProxy's hooks (rewrite, modifyResponse,
// upstreamError).

// forwardInfo is what the proxy knows of a request ReverseProxy forwards,
// which its hooks (rewrite, modifyResponse, upstreamError) read from the
// request's context.
type forwardInfo struct {
	ip   netip.Addr
	res  *engine.Result
	body *endedBody  // r.Body as handed to ReverseProxy; nil: none
	w    http.Header // the client's response headers (untyped)
	cw   relayWriter // the client's ResponseWriter as ReverseProxy writes to it
	// The Connection lines of the upstream's answer heads, read from the
	// connection when the Transport is the proxy's own to an http://
	// upstream (Proxy.sniff): the Transport deletes a Connection header
	// that says close before the proxy sees what it names.
	names headNames
	trace httptrace.ClientTrace
	gone  bool // the client went away before the answer came (upstreamError)
	// rules are the rules in force that decided the request: the fields
	// they read do not go upstream in its trailer (rewrite).
	rules *rules.Set
	// upConn: the final answer's Connection values as the Transport left
	// them (connTransport).
	upConn []string
	tb     trailerBody // the answer's body, when it may have a trailer (modifyResponse)
	// inf counts the 1xx answers relayWriter is given; err1xx is set
	// from the first one past their bound, which got1xx fails the
	// request with (informational.go).
	inf    informational
	err1xx error
}

// got1xx is the proxy's ClientTrace.Got1xxResponse: ReverseProxy's own,
// which relays the answer through relayWriter, runs before it (a trace
// added to a context runs before those already in it, as package
// httptrace documents), so that a 1xx answer past the bound fails the
// request as it comes, unrelayed.
func (info *forwardInfo) got1xx(int, textproto.MIMEHeader) error { return info.err1xx }

// relayWriter is the client's ResponseWriter as ReverseProxy writes to
// it: a 1xx answer it relays (103 Early Hints, 100 Continue) goes without
// its hop-by-hop headers, and not at all to an HTTP/1.0 client, which
// knows no 1xx (RFC 9110 §15.2), nor past their bound (informational.go;
// forwardInfo.got1xx).
type relayWriter struct {
	http.ResponseWriter
	info   *forwardInfo
	http10 bool
}

func (w *relayWriter) WriteHeader(code int) {
	if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	h := w.ResponseWriter.Header()
	if w.info.err1xx == nil {
		w.info.err1xx = w.info.inf.add(h)
	}
	if w.http10 || w.info.err1xx != nil {
		return // ReverseProxy clears the headers it set for it
	}
	cv := h["Connection"]
	if v, ok := w.info.names.take(code); ok {
		cv = v
	}
	conn := hop.NewNames(cv)
	for k := range h {
		if hop.Is(k) || conn.Has(k) {
			delete(h, k)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap serves http.ResponseController (Flush, Hijack).
func (w *relayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.o.Upstream)
	if p.o.PreserveHost {
		pr.Out.Host = pr.In.Host
	}
	info, _ := pr.In.Context().Value(ctxKey{}).(*forwardInfo)
	h := pr.Out.Header
	var trust peerTrust
	for k := range h {
		if proxyHeader(k) || underscoredHop(k) || clientIPHeader(k) && !trust.passes(p, pr.In) {
			delete(h, k) // ReverseProxy drops Forwarded and three of these, spelled so, but not X-Real-IP or Sluice-Deferred-Id
		}
	}
	delete(h, "Http2-Settings") // hop-by-hop (h2c.go); ReverseProxy drops it only when Connection names it
	if t := pr.Out.Trailer; len(t) > 0 && info.body != nil {
		conn := hop.NewNames(pr.In.Header["Connection"])
		var buf [8]string
		read := ruleFields(info.rules, buf[:0])
		for k := range t {
			// Not what the head goes without (hop-by-hop, Host, the
			// proxy's own, a client address), nor what a trailer must
			// not carry (RFC 9110 §6.5.1: Authorization, Host, framing,
			// request modifiers), nor what a rule reads (an API key,
			// the Cookie, a POST's method override, whether a rule
			// reads methods or not), which an upstream that merges its
			// trailer into its headers would take for the request's
			// own, unseen by any rule (trailers.go).
			if proxyHeader(k) || clientIPHeader(k) || dropTrailerField(k, conn) || fieldIn(k, read) ||
				rules.OverrideHeader(k) {
				delete(t, k)
			}
		}
		info.body.in, info.body.out = pr.In.Trailer, t
		if len(t) > 0 {
			// Trailers go upstream (HTTP/1.1) only after a chunked body:
			// over HTTP/2 the client may have sent a Content-Length too.
			pr.Out.ContentLength = -1
		}
	}
	if info.ip.IsValid() {
		a := info.ip.String()
		h["X-Forwarded-For"] = []string{a}
		h["X-Real-Ip"] = []string{a}
	}
	f := p.forwarded(pr.In, &trust) // pr.In keeps the headers deleted from h
	h["X-Forwarded-Host"] = []string{f.host}
	h["X-Forwarded-Proto"] = []string{f.proto}
	if f.port != "" {
		h["X-Forwarded-Port"] = []string{f.port}
	}
	h["Forwarded"] = []string{forwardedValue(info.ip, f.host, f.proto)}
}

// modifyResponse replaces the upstream's rate-limit headers with ours.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	if listener.TimedOut(resp.Request) {
		// The client's body stalled and the upstream answered what it
		// got of it: the upstream saw a truncated request, so its answer
		// is not relayed (upstreamError answers 408).
		return listener.ErrBodyTimeout
	}
	if resp.StatusCode < 100 {
		return errBadStatus(resp.StatusCode) // upstreamError answers 502
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		p.boundTunnel(resp) // tunnel.go
	}
	if resp.StatusCode == http.StatusNotModified {
		// As net/http's HTTP/1 server (and the h1 front) drop it: its
		// HTTP/2 server would pass it on, and Go's HTTP/2 client then
		// takes the 304 for a body cut short (unexpected EOF).
		delete(resp.Header, "Content-Length")
	}
	info, _ := resp.Request.Context().Value(ctxKey{}).(*forwardInfo)
	cv, sniffed := info.names.take(resp.StatusCode)
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		if !sniffed {
			cv = resp.Header["Connection"]
		}
		upgradeHeaders(resp.Header, cv)
	case sniffed && len(cv) > 0:
		// ReverseProxy has dropped what a Connection header left by the
		// Transport names; this is what one it deleted named.
		conn := hop.NewNames(cv)
		for k := range resp.Header {
			if conn.Has(k) {
				delete(resp.Header, k)
			}
		}
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != http.NoBody {
		// The answer's trailer goes without hop-by-hop and forbidden
		// fields, and the rate-limit ones set below (trailers.go):
		// those it declares now, before ReverseProxy announces them,
		// all it sent as its body ends.
		tc := cv
		if !sniffed {
			tc = info.upConn
		}
		limits := info.res != nil && info.res.SetsHeaders()
		if len(resp.Trailer) > 0 {
			dropTrailers(resp.Trailer, hop.NewNames(tc), limits)
		}
		if resp.ContentLength < 0 || resp.ProtoMajor != 1 || len(resp.Trailer) > 0 {
			// Not an HTTP/1 body of known length, which has no trailer.
			info.tb = trailerBody{ReadCloser: resp.Body, resp: resp, conn: tc, limits: limits}
			resp.Body = &info.tb
		}
	}
	if info.res != nil {
		info.res.SetHeaders(resp.Header)
	}
	if info.w != nil {
		// ReverseProxy copies resp.Header into the client's headers
		// value by value: a key without values would not reach them.
		// Set after any 1xx answer, whose relay clears them.
		untyped(info.w, resp.Header)
	}
	return nil
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	info, _ := r.Context().Value(ctxKey{}).(*forwardInfo)
	if info.body != nil && info.body.failed.Load() {
		err = fmt.Errorf("%w: %w", errClientBody, err)
	}
	info.gone = p.fail(w, r, info.res, err)
}

// upgradeHeaders drops from h, a 101 Switching Protocols answer's headers,
// the hop-by-hop ones (those the fixed list has and those its Connection
// values cv name) but Upgrade and Connection: Upgrade, which the switch
// needs: ReverseProxy passes a 101's headers on as they came.
func upgradeHeaders(h http.Header, cv []string) {
	conn := hop.NewNames(cv)
	for k := range h {
		if k != "Upgrade" && (hop.Is(k) || conn.Has(k)) {
			delete(h, k)
		}
	}
	h["Connection"] = []string{"Upgrade"}
}
