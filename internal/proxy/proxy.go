// Package proxy is the daemon's reverse-proxy mode (proxy.listen →
// proxy.upstream): every request is matched against the rules in force and
// decided by the engine before it may reach the upstream.
//
// Behaviour:
//
//   - A limited request never reaches the upstream. Action reject answers
//     429 with Retry-After, the rate-limit headers and
//     {"error":"rate_limited","rule":NAME,"retry_after_ms":N}; action delay
//     holds the request for a slot (up to the rule's max_delay; the leaky
//     bucket spaces requests evenly) and then forwards it, or answers 429;
//     action shadow always forwards (the would-be denial is counted and
//     logged). Action defer (Options.Defer set): a request denied only by
//     defer rules is queued with its method, URI, headers (with the
//     X-Forwarded-* and Forwarded the upstream would have seen) and body, and answered
//     202 {"deferred_id": ID} (no Location: GET /v1/deferred/ID is served
//     on the decision API, not here); a body over
//     the rule's defer.max_body_bytes answers 413, a full queue (or a
//     queue Redis cannot reach, or too many bodies being queued at once:
//     deferq.ErrBusy) 429 as without defer.
//   - Every response a rule applied to carries the tightest enforcing
//     rule's X-RateLimit-* and RateLimit-Policy / RateLimit headers; the
//     upstream's own headers of those names are replaced, and its
//     fields of those names dropped from the answer's trailer
//     (trailers.go: limitFields).
//   - When the store cannot decide: on_error allow forwards, deny answers
//     503 {"error":"store_unavailable"}.
//   - A request whose client went away before its decision, while held
//     (action delay) or before the upstream answered is answered 499
//     with no body (writeGone), never the empty 200 its server would send
//     for a handler that wrote nothing, and counted under each of its
//     rules in sluice_clients_gone_total{stage}, never denied (package
//     engine, gone.go; the upstream stage here: Engine.ClientGone).
//   - Streaming: a response of unknown length (chunked) or of type
//     text/event-stream is flushed as it arrives, so server-sent events
//     and long polls work; one of known length goes out in one write.
//     WebSocket and other Upgrade requests are passed through (a tunnel
//     through which nothing passes for TunnelIdleTimeout is closed both
//     ways: tunnel.go), but never
//     an upgrade to HTTP/2: Upgrade: h2c and HTTP2-Settings are dropped
//     and the request forwarded as plain HTTP/1.1 (h2c.go). An HTTP/2
//     extended CONNECT (RFC 8441, offered only under
//     GODEBUG=http2xconnect=1) is answered 501
//     {"error":"extended_connect_unsupported",...} before any rule is
//     matched, and never forwarded (xconnect.go); any other CONNECT (a
//     forward proxy's tunnel) 405 {"error":"method_not_allowed",...}.
//   - Two engines, one behaviour: a GET or HEAD without a body and without
//     Upgrade, to an http:// upstream, is forwarded by the fast path
//     (fast.go: the request written straight onto a pooled HTTP/1.1
//     connection in the handler's goroutine); every other request by
//     httputil.ReverseProxy over net/http's Transport. Both drop hop-by-hop
//     headers (and those Connection names) both ways (a trailer, either
//     way, goes without them, declared or not, and without the fields RFC
//     9110 §6.5.1 keeps out of a trailer; a request's also without the
//     headers a rule in force reads: trailers.go), bound the upstream's
//     response headers (DefaultMaxResponseHeaderBytes, else 502) and join
//     request paths to the upstream URL's path the same way. The headers
//     an upstream answer's Connection names are dropped also when it says
//     close (Connection: close, X-Foo), which http.ReadResponse (the
//     Transport's, the fast path's fallback) deletes before the proxy sees
//     what it names: the heads are read from the connection's bytes as
//     well (connnames.go). Not through Options.Transport, whose bytes the
//     proxy does not see: there X-Foo passes, as through ReverseProxy
//     alone (Options.Transport). 1xx answers (103 Early Hints) are relayed without their
//     hop-by-hop headers, and not to an HTTP/1.0 client (RFC 9110 §15.2),
//     whose Upgrade is dropped (§7.8); past MaxInformational of them, or
//     their fields past DefaultMaxResponseHeaderBytes, the request fails
//     502 (informational.go). An upstream status below 100 (which
//     http.ReadResponse takes) answers 502.
//   - A request whose target is an absolute URI without an authority
//     (GET http:login: net/http takes it, with no path) is answered 400
//     before any rule is matched, never forwarded: the rules would match
//     it as "/", and the upstream get it as it came (GET login).
//   - Host: by default the upstream sees its own host (Host: the upstream
//     URL's host) and the original one in X-Forwarded-Host; with
//     PreserveHost it sees the incoming Host.
//   - X-Forwarded-For and X-Real-IP are set to the client address as
//     resolved by Options.ClientIP (one address, never an untrusted
//     client's own header), X-Forwarded-Proto to http or https (the
//     listener's scheme), X-Forwarded-Host to the incoming Host; from a
//     trusted proxy (Options.ClientIP), its own X-Forwarded-Proto, -Host
//     and -Port pass instead, each when it sent one valid value, and where
//     it sent no X-Forwarded-Proto or -Host, the proto= and host= of its
//     RFC 7239 Forwarded when that is one valid element and it sent no
//     X-Forwarded-For (reqheaders.go:
//     forwarded; forwarded.go). Forwarded is set to one element saying
//     the same: for= the client, host=, proto=. Other incoming Forwarded /
//     X-Forwarded-* / X-Real-IP headers are dropped, also spelled with '_'
//     (X_Forwarded_For), which CGI and WSGI servers read alike, and so are
//     the hop-by-hop and framing headers spelled so (Transfer_Encoding:
//     reqheaders.go, underscoredHop); so is a
//     client's Sluice-Deferred-Id, which only the replay of a deferred
//     request carries (package deferq), and so are X-Original-URL and
//     X-Rewrite-URL, by which some frameworks route instead of by the
//     request line the rules match (from any peer: reqheaders.go). The headers by which CDNs and load
//     balancers name the client (True-Client-IP, X-Client-IP,
//     CF-Connecting-IP, Fastly-Client-IP, X-Cluster-Client-IP) pass from
//     a trusted proxy and are dropped from any other peer.
//   - The upstream's unreachability answers 502, a response header timeout
//     504, both with a JSON error body. A request body that stalls for the
//     listener's body_read_timeout (package listener) abandons the upstream
//     request, freeing its connection, and answers 408; one that cannot be
//     read (a malformed chunked encoding) answers 400 and closes the
//     connection.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
)

// Defaults for the zero Options.
const (
	DefaultDialTimeout           = 5 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultIdleConnTimeout       = 90 * time.Second
	DefaultMaxIdleConnsPerHost   = 256
	// DefaultTunnelIdleTimeout: as HAProxy's documented timeout tunnel;
	// nginx closes a tunnel idle for proxy_read_timeout (60s), Envoy a
	// stream idle for stream_idle_timeout (5m), which cuts WebSockets
	// whose applications ping less often.
	DefaultTunnelIdleTimeout = time.Hour
	// DefaultMaxResponseHeaderBytes bounds the upstream's response
	// headers; over it the client gets 502.
	DefaultMaxResponseHeaderBytes = 1 << 20
	// MaxInformational bounds the 1xx answers (100 Continue, 103 Early
	// Hints) relayed before an upstream's final answer; one more answers
	// 502, as do 1xx heads whose headers together pass
	// DefaultMaxResponseHeaderBytes.
	MaxInformational = 5
)

// Options configures the proxy. Upstream and Engine are required.
type Options struct {
	// Upstream is where allowed requests go: scheme, host and optionally a
	// base path that request paths are joined to.
	Upstream *url.URL
	// Engine returns the engine (and rules) in force. It is called once per
	// request and must be cheap: the daemon keeps the engine in an
	// atomic.Pointer and swaps it on reload.
	Engine func() *engine.Engine
	// ClientIP finds the client address for ip keys and X-Forwarded-For.
	ClientIP clientip.Resolver
	// PreserveHost sends the incoming Host header upstream instead of the
	// upstream's host.
	PreserveHost bool
	// DialTimeout bounds connecting to the upstream; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers after the request is sent; 0 means
	// DefaultResponseHeaderTimeout. The body streams without a limit.
	ResponseHeaderTimeout time.Duration
	// TunnelIdleTimeout closes an upgraded connection (a WebSocket)
	// through which nothing has passed, either way, for that long, so
	// that an idle tunnel does not hold its client connection (and its
	// max_connections slot) for ever; 0 means DefaultTunnelIdleTimeout.
	TunnelIdleTimeout time.Duration
	// TLSClientConfig is the TLS configuration for an https:// upstream
	// (its roots, a client certificate); nil: the system's roots. The
	// server name defaults to the upstream's host.
	TLSClientConfig *tls.Config
	// Transport, if set, replaces the transport built from the options
	// above (tests), and the fast path: every request goes through
	// httputil.ReverseProxy and it. The hop-by-hop headers of the
	// upstream's answers are dropped as through the proxy's own (those
	// of RFC 9110 §7.6.1, and those a Connection header it leaves in the
	// answer names), with one limit: net/http's Transport (its
	// http.ReadResponse) deletes a Connection header that says close, of
	// a 1xx answer as of a final one, before the proxy sees it, and the
	// proxy, which does not read this transport's connections, cannot
	// tell what else it named: X-Foo in Connection: close, X-Foo passes
	// to the client. Any RoundTripper built on net/http's reads heads so.
	// The proxy's own transport reads them from the connection's bytes
	// (connnames.go).
	Transport http.RoundTripper
	// Logger receives upstream errors; nil discards.
	Logger *slog.Logger
	// Now is the clock of the log's throttle; nil means time.Now.
	Now func() time.Time
	// Defer, if set, queues requests denied only by defer rules.
	Defer *deferq.Queue
}

// Proxy is the rate-limiting reverse proxy, an http.Handler. Serve it from
// an http.Server with ReadHeaderTimeout and IdleTimeout set; it is safe for
// concurrent use.
type Proxy struct {
	o  Options
	rp *httputil.ReverseProxy
	// The fast path's (fast.go): nil pool when the upstream is https or
	// Options.Transport is set.
	pool      *pool
	sniff     bool // the Transport is the proxy's own, to an http:// upstream: its connections are sniffConns
	rht       time.Duration
	maxHeader int64
	// tunnelIdle closes an upgraded connection idle for that long (tunnel.go).
	tunnelIdle time.Duration
	upLog      logthrottle.Throttle // upstream failures: logged once a second
	deferLog   logthrottle.Throttle // failures to defer: logged once a second
	stallLog   logthrottle.Throttle // client bodies stalled (debug): once a second
	badLog     logthrottle.Throttle // client bodies unreadable (debug): once a second
}

type ctxKey struct{}

// New returns the proxy for o.
func New(o Options) (*Proxy, error) {
	if o.Upstream == nil || o.Upstream.Scheme == "" || o.Upstream.Host == "" {
		return nil, errors.New("proxy: Options.Upstream must be an absolute URL such as http://127.0.0.1:9000")
	}
	if o.Upstream.Scheme != "http" && o.Upstream.Scheme != "https" {
		return nil, errors.New("proxy: upstream scheme must be http or https, not " + o.Upstream.Scheme)
	}
	if o.Engine == nil {
		return nil, errors.New("proxy: nil Options.Engine")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &Proxy{o: o, maxHeader: DefaultMaxResponseHeaderBytes, tunnelIdle: o.TunnelIdleTimeout}
	if p.tunnelIdle <= 0 {
		p.tunnelIdle = DefaultTunnelIdleTimeout
	}
	if o.Transport == nil {
		t := newTransport(o)
		o.Transport, p.o.Transport = t, t
		p.rht = t.ResponseHeaderTimeout
		sniffTransport(t, o) // connnames.go
		p.sniff = true
		if o.Upstream.Scheme == "http" {
			addr := o.Upstream.Host
			if o.Upstream.Port() == "" {
				addr = net.JoinHostPort(o.Upstream.Hostname(), "80")
			}
			p.pool = &pool{addr: addr, idleTimeout: DefaultIdleConnTimeout, max: DefaultMaxIdleConnsPerHost,
				dialer: net.Dialer{Timeout: dialTimeout(o), KeepAlive: 30 * time.Second}}
		}
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: connTransport{o.Transport}, // trailers.go
		// 0: ReverseProxy still flushes each write of a response of
		// unknown length (chunked) or of type text/event-stream, so
		// streams stream; one of known length goes out in one write,
		// headers and body together.
		FlushInterval:  0,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		BufferPool:     bufferPool{},
		// Its lines (an answer the upstream cut short, or one cut off
		// because the client's body stalled while the upstream streamed it
		// back) come one a request: at most one a second of each kind.
		ErrorLog: logthrottle.NewLogLogger(o.Logger, slog.LevelWarn, o.Now, "read error during body copy"),
	}
	return p, nil
}

// Close closes the proxy's idle upstream connections, and each one its
// requests in flight give back from now on: call it when the proxy is
// replaced (a reload), once no new request reaches it. Requests in flight
// finish. An upstream that keeps idle connections open would otherwise
// hold them for as long as it runs.
func (p *Proxy) Close() {
	if p.pool != nil {
		p.pool.closeIdle()
	}
	if t, ok := p.o.Transport.(interface{ CloseIdleConnections() }); ok {
		// Connections its requests in flight give back close when
		// idle for DefaultIdleConnTimeout (the Transport's timers).
		t.CloseIdleConnections()
	}
}

// bufferPool recycles the 32 KiB buffers ReverseProxy copies bodies
// through, which it would otherwise allocate per request.
type bufferPool struct{}

// errOpaqueTarget answers a request whose target is an absolute URI
// without an authority, such as http:login.
var errOpaqueTarget = errors.New("the request target is an absolute URI without an authority (such as http:login); send a path (/login) or an http:// URI")

// errBadHost answers an HTTP/2 request whose host is not one host[:port].
var errBadHost = errors.New("the request's host (:authority) is not a valid host[:port]")

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

func dialTimeout(o Options) time.Duration {
	if o.DialTimeout <= 0 {
		return DefaultDialTimeout
	}
	return o.DialTimeout
}

func newTransport(o Options) *http.Transport {
	dial := dialTimeout(o)
	rht := o.ResponseHeaderTimeout
	if rht <= 0 {
		rht = DefaultResponseHeaderTimeout
	}
	return &http.Transport{
		Proxy:                  nil, // never an environment proxy between us and the upstream
		DialContext:            (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           4 * DefaultMaxIdleConnsPerHost,
		MaxIdleConnsPerHost:    DefaultMaxIdleConnsPerHost,
		IdleConnTimeout:        DefaultIdleConnTimeout,
		TLSHandshakeTimeout:    dial,
		ResponseHeaderTimeout:  rht,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: DefaultMaxResponseHeaderBytes,
	}
}

// ServeHTTP decides the request and forwards it if allowed.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		refuseConnect(w, r) // xconnect.go
		return
	}
	if r.URL.Opaque != "" {
		// An absolute-form target without an authority (GET
		// http:login): no path for the rules to match (they see "/"),
		// and ReverseProxy would send it on as it came (GET login), which
		// a server that reads a path without its leading '/' as if it
		// had one serves as /login.
		engine.WriteMatchError(w, errOpaqueTarget)
		return
	}
	if r.ProtoMajor != 1 && !httpguts.ValidHostHeader(r.Host) {
		// Go's HTTP/2 server takes any :authority, where its HTTP/1 one
		// (and the h1 front) answer 400 to a Host that is not one
		// host[:port]: refused alike, so that a client puts no quote,
		// space or '<' in the upstream's X-Forwarded-Host over HTTP/2
		// either.
		engine.WriteMatchError(w, errBadHost)
		return
	}
	e := p.o.Engine()
	ip := p.o.ClientIP.ClientIP(r)
	var buf [8]rules.Match
	ms, err := e.Match(r, ip, buf[:0])
	if err != nil {
		engine.WriteMatchError(w, err)
		return
	}
	if len(ms) == 0 {
		p.forward(w, r, ip, e, nil)
		return
	}
	var res engine.Result
	gone := false
	if delays(ms) {
		// On the h1 front, have the connection watched while the
		// request may be held, so that a client that leaves ends the
		// wait and its request goes no further, as on net/http; on
		// net/http, whose watch of an HTTP/1 connection starts at the
		// end of the request's body, read the body first (held.go).
		r = readAhead(r)
		ctx, stop := h1.Watch(r.Context())
		res = p.admit(ctx, e, ms)
		gone = ctx.Err() != nil
		stop()
	} else {
		res = p.admit(r.Context(), e, ms)
		gone = res.Err != nil && r.Context().Err() != nil
	}
	if gone {
		// The client went away while waiting: not queued, so the
		// charges AdmitOrDefer made for a deferrable request go back.
		e.NotQueued(r.Context(), &res)
		if !res.Gone() {
			// Left as its wait ended (the engine saw it still there).
			e.ClientGone(ms, metrics.GoneHeld)
		}
		writeGone(w)
		return
	}
	if !res.Allowed {
		if res.Deferrable && p.o.Defer != nil && p.deferRequest(w, r, ip, e, &res, ms) {
			return
		}
		engine.WriteDenied(w, &res, http.StatusTooManyRequests)
		return
	}
	rp := &res // headers set in modifyResponse
	if res.Rule == nil {
		rp = nil
	}
	if p.forward(w, r, ip, e, rp) {
		e.ClientGone(ms, metrics.GoneUpstream)
	}
}

// delays reports whether a rule of ms may hold the request (action delay).
func delays(ms []rules.Match) bool {
	for i := range ms {
		if ms[i].Rule.Action == rules.Delay {
			return true
		}
	}
	return false
}

// forward sends r to the upstream and relays its answer; e is the engine
// that decided it. It reports whether r's client went away before the
// answer came (answered 499).
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, ip netip.Addr, e *engine.Engine, res *engine.Result) (gone bool) {
	fast := p.fastPath(r)
	if !fast && r.Header["Upgrade"] != nil {
		if r.ProtoMajor == 1 && r.ProtoMinor == 0 {
			// A server ignores an HTTP/1.0 request's Upgrade (RFC 9110
			// §7.8): its client could not follow a 101.
			delete(r.Header, "Upgrade")
		} else {
			dropHTTP2Upgrade(r.Header) // h2c.go
		}
		fast = p.fastPath(r)
	}
	if fast {
		return p.fastForward(w, r, ip, res)
	}
	info := &forwardInfo{ip: ip, w: w.Header(), rules: e.Rules()}
	info.cw = relayWriter{ResponseWriter: w, info: info, http10: !r.ProtoAtLeast(1, 1)}
	if res != nil {
		// The context carries a copy, so that the caller's Result stays
		// on its stack on the fast path (one allocation per request).
		rc := *res
		info.res = &rc
	}
	if r.Body != nil && r.Body != http.NoBody {
		info.body = newEndedBody(r.Body, r.ContentLength) // reqbody.go
	}
	ctx := r.Context()
	if info.body == nil {
		// On the h1 front (a bodiless GET or HEAD to an https://
		// upstream: the front hands off every other request to
		// net/http, which watches its client itself), have the client
		// watched, so that one that goes away frees its upstream
		// request at once and not at response_header_timeout. The
		// fast path watches only once the upstream is slow
		// (fastForward); here a watch costs little beside the TLS.
		var stop func()
		ctx, stop = h1.Watch(ctx)
		defer stop()
	}
	// The 1xx answers the Transport reads are bounded (informational.go).
	info.trace.Got1xxResponse = info.got1xx
	if p.sniff {
		// The connection the Transport picks reads the answer's heads
		// into info.names (connnames.go).
		info.trace.GotConn = func(gi httptrace.GotConnInfo) {
			if sc, ok := gi.Conn.(*sniffConn); ok {
				sc.watch(&info.names)
			}
		}
	}
	ctx = httptrace.WithClientTrace(ctx, &info.trace)
	r = r.WithContext(context.WithValue(ctx, ctxKey{}, info))
	if info.body != nil {
		r.Body = info.body
	}
	p.rp.ServeHTTP(&info.cw, r)
	return info.gone
}

// untyped marks h, the headers of the answer to the client, as typed with
// nothing when up, the upstream's, has no Content-Type: net/http's servers
// and the h1 front would otherwise sniff a type from the body and send it
// (an HTML page without a type became text/html, a page that is not quite
// HTML text/plain, changing how the client reads it). A Content-Type key
// with no values writes no header and stops the sniffing.
func untyped(h, up http.Header) {
	if _, ok := up["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
}
