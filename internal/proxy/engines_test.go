package proxy_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
	"github.com/sluicehq/sluice/memstore"
)

// The engines the proxy runs on, as the daemon serves them. Client side:
// a plaintext proxy.listen is the fast HTTP/1.1 front (package h1) for
// bodiless GET and HEAD, handing every other request to net/http's
// server; with proxy.tls, net/http serves alone, HTTP/1.1 or HTTP/2 as
// ALPN picks. Upstream side: a GET or HEAD over HTTP/1 to an http://
// upstream takes the fast path (fast.go), everything else ReverseProxy;
// "ReverseProxy only" sets Options.Transport, as an https:// upstream
// does, so that every request takes it. A test runs each promise on all
// of them (forEngine); which upstream path a request takes on an engine
// follows from the request (a body, an Upgrade, HTTP/2).
type engineCase struct {
	name string
	tls  bool // proxy.tls: net/http alone
	h2   bool // the client speaks HTTP/2 (with tls)
	rp   bool // Options.Transport set: ReverseProxy for every request
}

var engineCases = []engineCase{
	{name: "plaintext (h1 front)"},
	{name: "plaintext (h1 front), ReverseProxy only", rp: true},
	{name: "TLS HTTP/1.1", tls: true},
	{name: "TLS HTTP/1.1, ReverseProxy only", tls: true, rp: true},
	{name: "TLS HTTP/2", tls: true, h2: true},
	{name: "TLS HTTP/2, ReverseProxy only", tls: true, h2: true, rp: true},
}

// forEngine runs f on every engine; http1 limits it to those clients
// reach over HTTP/1.x (for what HTTP/2 has no form of: raw framing,
// Upgrade).
func forEngine(t *testing.T, http1 bool, f func(t *testing.T, ec engineCase)) {
	for _, ec := range engineCases {
		if http1 && ec.h2 {
			continue
		}
		t.Run(ec.name, func(t *testing.T) { f(t, ec) })
	}
}

// engineOpts is what a test sets of the proxy and its listener; zero
// fields take the daemon's defaults.
type engineOpts struct {
	specs   []rules.Spec // default: one generous rule, r at 1000/s
	proxy   proxy.Options
	lis     listener.Options
	trusted []string
	store   sluice.Store // default: a memory store
	// access, if set, is called with the status of each request the
	// proxy's handler ends, as an access log wrapped around it records it
	// (200 if the handler wrote none, as net/http and the h1 front send).
	access func(status int)
}

// eserved is the proxy served on one engine.
type eserved struct {
	ec     engineCase
	URL    string // http:// or https://
	Addr   string
	client *http.Client
	ln     *listener.Listener
	reg    *prometheus.Registry
	tlsCfg *tls.Config  // the client's, for raw connections
	active atomic.Int64 // requests in the proxy's handler now
}

// startOn serves a proxy in front of upstreamURL on the engine ec.
func startOn(t *testing.T, ec engineCase, upstreamURL string, o engineOpts) *eserved {
	t.Helper()
	specs := o.specs
	if specs == nil {
		specs = []rules.Spec{{Name: "r", Rate: "1000/s"}}
	}
	set, err := rules.Compile("test.yaml", specs)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	store := o.store
	if store == nil {
		store = memstore.New(memstore.Options{})
	}
	e, err := engine.New(engine.Options{Store: store, Rules: set, Metrics: m, Now: alignedNow()})
	if err != nil {
		t.Fatal(err)
	}
	po := o.proxy
	po.Upstream, err = url.Parse(upstreamURL)
	if err != nil {
		t.Fatal(err)
	}
	po.Engine = func() *engine.Engine { return e }
	if ec.rp && po.Transport == nil {
		// As the proxy's own (newTransport), which an https:// upstream uses.
		rht := po.ResponseHeaderTimeout
		if rht == 0 {
			rht = proxy.DefaultResponseHeaderTimeout
		}
		tr := &http.Transport{Proxy: nil, ResponseHeaderTimeout: rht, ExpectContinueTimeout: time.Second,
			MaxResponseHeaderBytes: proxy.DefaultMaxResponseHeaderBytes}
		t.Cleanup(tr.CloseIdleConnections)
		po.Transport = tr
	}
	p, err := proxy.New(po)
	if err != nil {
		t.Fatal(err)
	}
	lo := o.lis
	lo.Name, lo.Metrics = "proxy", m
	if lo.ReadHeaderTimeout == 0 {
		lo.ReadHeaderTimeout = 10 * time.Second
	}
	if lo.BodyReadTimeout == 0 {
		lo.BodyReadTimeout = listener.DefaultBodyReadTimeout
	}
	if lo.IdleTimeout == 0 {
		lo.IdleTimeout = time.Minute
	}
	if lo.MaxConnections == 0 {
		lo.MaxConnections = listener.DefaultMaxConnections
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &eserved{ec: ec, Addr: ln.Addr().String(), reg: reg}
	srv, wl := listener.Server(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.active.Add(1)
		defer s.active.Add(-1)
		if o.access == nil {
			p.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		p.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		o.access(sw.status)
	}), lo)
	s.ln = wl
	done := make(chan struct{})
	if !ec.tls {
		front := h1.New(srv)
		go func() { front.Serve(wl); close(done) }()
		t.Cleanup(func() { front.Close(); <-done })
		s.URL = "http://" + s.Addr
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		s.client = &http.Client{Transport: tr}
		return s
	}
	ca := tlstest.NewCA(t, "proxy")
	pair := ca.Server(t)
	tl := tls.NewListener(wl, &tls.Config{Certificates: []tls.Certificate{pair.TLS}, NextProtos: []string{"h2", "http/1.1"}})
	go func() { srv.Serve(tl); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
	s.URL = "https://" + s.Addr
	cfg := ca.ClientConfig()
	if !ec.h2 {
		cfg.NextProtos = []string{"http/1.1"}
	}
	s.tlsCfg = cfg
	tr := &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: ec.h2}
	t.Cleanup(tr.CloseIdleConnections)
	s.client = &http.Client{Transport: tr}
	return s
}

// dial opens a raw HTTP/1.1 connection to s (TLS with ALPN http/1.1 on a
// TLS engine), closed when the test ends.
func (s *eserved) dial(t *testing.T) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if s.ec.tls {
		cfg := s.tlsCfg.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		c, err = tls.Dial("tcp", s.Addr, cfg)
	} else {
		c, err = net.Dial("tcp", s.Addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(safety))
	t.Cleanup(func() { c.Close() })
	return c
}

// do sends req with the engine's client; the body is read whole.
func (s *eserved) do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), safety)
	defer cancel()
	resp, err := s.client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := readAll(resp)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, b
}

// wantProto checks that resp came over the engine's protocol.
func (s *eserved) wantProto(t *testing.T, resp *http.Response) {
	t.Helper()
	if want := map[bool]int{true: 2, false: 1}[s.ec.h2]; resp.ProtoMajor != want {
		t.Fatalf("answer over %s, want HTTP/%d: the test does not test its engine", resp.Proto, want)
	}
}
