package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/deferq"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// upstream is a real HTTP server that records what reaches it.
type upstream struct {
	srv  *httptest.Server
	hits atomic.Int64
	mu   sync.Mutex
	last *http.Request
	at   []time.Time
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.last = r.Clone(context.Background())
		u.at = append(u.at, time.Now())
		u.mu.Unlock()
		w.Header().Set("X-RateLimit-Limit", "999") // the proxy's figures must replace these
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

type fixture struct {
	proxy *served
	up    *upstream
	reg   *prometheus.Registry
}

// served is the proxy as the daemon serves it: behind listener.Server,
// with the client-side limits of a proxy: block.
type served struct {
	URL  string // http://127.0.0.1:PORT
	Addr string
}

type setup struct {
	specs    []rules.Spec
	store    sluice.Store
	onError  string
	trusted  []netip.Prefix
	preserve bool
	up       *upstream
	timeout  time.Duration
	base     string // the upstream URL's path
	// transport, if set, is Options.Transport: every request then goes
	// through ReverseProxy (no fast path).
	transport http.RoundTripper
	deferq    *deferq.Queue    // Options.Defer
	log       *slog.Logger     // Options.Logger
	now       func() time.Time // Options.Now
}

func start(t *testing.T, s setup) *fixture {
	t.Helper()
	set, err := rules.Compile("test.yaml", s.specs)
	if err != nil {
		t.Fatalf("rules.Compile: %v", err)
	}
	if s.store == nil {
		s.store = memstore.New(memstore.Options{})
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	e, err := engine.New(engine.Options{Store: s.store, Rules: set, OnError: s.onError, Metrics: m, Now: alignedNow()})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	up := s.up
	if up == nil {
		up = newUpstream(t)
	}
	u, _ := url.Parse(up.srv.URL + s.base)
	p, err := proxy.New(proxy.Options{Upstream: u, Engine: func() *engine.Engine { return e },
		ClientIP: clientip.Resolver{Trusted: s.trusted}, PreserveHost: s.preserve, ResponseHeaderTimeout: s.timeout,
		Transport: s.transport, Defer: s.deferq, Logger: s.log, Now: s.now})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	return &fixture{proxy: serve(t, p, m), up: up, reg: reg}
}

// alignedNow is a clock that reads the start of today (UTC) when it is
// made, then runs as the wall clock does. On it the rules' windows (fixed,
// or a sliding counter's, of a minute or an hour) start with the fixture:
// none ends between the decisions a test counts, which on the wall clock
// a minute's end could split (the 4th request of a 3/m window admitted in
// the next).
func alignedNow() func() time.Time {
	t0, start := time.Now().UTC().Truncate(24*time.Hour), time.Now()
	return func() time.Time { return t0.Add(time.Since(start)) }
}

// serve serves h as the daemon serves the plaintext proxy (the fast front
// of package h1 over listener.Server with the default limits of a proxy:
// block), until the test ends.
func serve(t *testing.T, h http.Handler, m *metrics.Metrics) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, wl := listener.Server(ln, h, listener.Options{Name: "proxy", ReadHeaderTimeout: 10 * time.Second,
		BodyReadTimeout: listener.DefaultBodyReadTimeout, IdleTimeout: time.Minute,
		MaxConnections: listener.DefaultMaxConnections, Metrics: m})
	// The fast front over it, as the daemon serves a plaintext proxy:
	// the simple requests take the front, the rest are handed to srv.
	front := h1.New(srv)
	done := make(chan struct{})
	go func() { front.Serve(wl); close(done) }()
	t.Cleanup(func() { front.Close(); <-done })
	return &served{URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String()}
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
