// Package server holds the daemon's wire adapters. This file is the HTTP
// decision API served on `listen`:
//
//	POST /v1/check          {"rule":NAME,"key":STRING,"cost":N} → {"allowed":…,"limit":…,"remaining":…,"retry_after_ms":…,"reset_after_ms":…}
//	POST /v1/report         the same body and answer; charges cost even past the limit (debt)
//	GET  /v1/rules          the rules in force
//	*    /v1/forward-auth   for gateways: nginx auth_request, Caddy forward_auth, Traefik ForwardAuth
//	GET  /healthz           200 while the process serves
//	GET  /readyz            200 when the store is reachable, else 503
//	GET  /metrics           Prometheus, from the injected registry
//	POST /json              the Envoy rate limit service's HTTP form (with Options.Envoy)
//	GET  /healthcheck       200 "OK" while the process serves (with Options.Envoy), the reference service's health path
//
// Errors are JSON, {"error":"…"}, with 400 for bad input, 403 for a
// browser's request for a web page (Sec-Fetch-Site, Origin), of any site,
// to /v1/* but forward-auth, /json and /metrics, 404 for an unknown path, 405 for a wrong
// method, 413 for a body over the limit, 415 for a compressed body
// (Content-Encoding), and 503 when the store cannot decide under on_error
// deny.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

// Defaults for the zero Options.
const (
	DefaultMaxBodyBytes = 64 << 10
	DefaultMaxKeyBytes  = 4 << 10
	DefaultReadyTimeout = 2 * time.Second
	DefaultDenyStatus   = http.StatusTooManyRequests
)

// MaxScrapes bounds the GET /metrics gathered at once; the others wait
// their turn (a client slow to read its answer holds no place: only the
// gathering waits). With Token, the scrapes carrying it have MaxScrapes
// places of their own. /metrics is open to anyone and a scrape costs a full
// Gather (milliseconds of CPU, and a megabyte of answer with the Envoy
// labels full), so a client sending many at once cannot have the daemon
// gather them all together. Prometheus scrapes once per interval.
const MaxScrapes = 2

// Defaults of the daemon's HTTP listeners (the decision API and the
// reverse proxy): how long a client may take to send its request headers,
// and how long an idle keep-alive connection is kept.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
)

// Options configures the decision API handler. Engine is required.
type Options struct {
	// Engine returns the engine (with its rules) in force. It is called
	// once per request and must be cheap: the daemon keeps the engine in
	// an atomic.Pointer and swaps it on reload.
	Engine func() *engine.Engine
	// ClientIP resolves the client of a /v1/forward-auth request from the
	// gateway's X-Forwarded-For; list the gateway in its Trusted proxies,
	// or every request is keyed by the gateway's own address.
	ClientIP clientip.Resolver
	// DenyStatus is the status of a limited /v1/forward-auth answer
	// (forward_auth.deny_status), 400–599; 0 means 429.
	DenyStatus int
	// Ready reports whether the store is reachable, for /readyz; nil means
	// always ready. It is called with a context bounded by ReadyTimeout.
	// Its error is shown, but with Token only to a request carrying it.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds Ready; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Gatherer serves /metrics (the registry given to metrics.New); nil
	// means /metrics answers 404.
	Gatherer prometheus.Gatherer
	// KeyMetrics names the metric families of Gatherer whose labels hold
	// clients' keys (the hot keys): with Token, /metrics serves them only
	// to a scrape that carries the token, as /v1/hotkeys, and the rest to
	// any.
	KeyMetrics []string
	// KeySeries, when set, reports whether a series of Gatherer (of the
	// family named family) has labels that hold clients' values, such as
	// the Envoy counters' descriptor labels built from request values:
	// with Token, those series too are served only to a scrape that
	// carries the token.
	KeySeries func(family string, labels []*dto.LabelPair) bool
	// MaxBodyBytes bounds a /v1/check body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxKeyBytes bounds a /v1/check key; 0 means DefaultMaxKeyBytes. Keys
	// longer than rules.MaxKeyLen are hashed before they reach the store.
	MaxKeyBytes int
	// Logger receives unexpected errors; nil discards.
	Logger *slog.Logger
	// Now is the clock of the throttled log lines (one a second of each
	// kind, such as a failed /metrics answer); nil means time.Now.
	Now func() time.Time
	// Envoy, when set, serves the Envoy rate limit service's HTTP form,
	// POST /json.
	Envoy *RLS
	// HotKeys, when set, serves GET /v1/hotkeys.
	HotKeys http.Handler
	// Deferred, when set, serves GET /v1/deferred/ID.
	Deferred http.Handler
	// Token, when set (api.token_file), is the bearer token every request
	// to /v1/* and /json must carry (Authorization: Bearer TOKEN): those
	// can spend anyone's quota. /healthz, /readyz and /metrics stay open,
	// for probes and scrapers (/metrics without KeyMetrics). Compared in
	// constant time.
	Token []byte
}

// authorized reports whether r carries the bearer token. Both sides are
// hashed first, so the comparison takes the same time whatever the token
// sent, its length included.
func (h *Handler) authorized(r *http.Request) bool {
	v := first(r.Header["Authorization"])
	if len(v) < 7 || !strings.EqualFold(v[:7], "Bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(v[7:])))
	return subtle.ConstantTimeCompare(got[:], h.token[:]) == 1
}

// Handler is the decision API. Build it with New; it is safe for concurrent
// use.
type Handler struct {
	o           Options
	metrics     prometheus.Gatherer
	openMetrics prometheus.Gatherer // metrics without Options.KeyMetrics: a scrape without the token
	promOpts    promhttp.HandlerOpts
	scrapes     chan struct{}     // a place for each scrape gathering (MaxScrapes)
	ownScrapes  chan struct{}     // with Token, those of the scrapes carrying it
	token       [sha256.Size]byte // sha256 of Options.Token, when set
	gateways    gatewayWarnings   // untrusted gateways warned about (forward-auth)
	methodless  gatewayWarnings   // gateways sending no method warned about (forward-auth)

	readyMu   sync.Mutex
	readyCall *readyCall // the store's readiness being asked, shared by /readyz meanwhile
}

// readyCall is one question to Options.Ready; done closes once err is set.
type readyCall struct {
	done chan struct{}
	err  error
}

// New returns the decision API handler for o.
func New(o Options) (*Handler, error) {
	if o.Engine == nil {
		return nil, errors.New("server: nil Options.Engine")
	}
	if o.DenyStatus == 0 {
		o.DenyStatus = DefaultDenyStatus
	}
	if o.DenyStatus < 400 || o.DenyStatus > 599 {
		// A 2xx would let a limited request through the gateway.
		return nil, fmt.Errorf("server: deny status %d is not a 4xx or 5xx status", o.DenyStatus)
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{o: o}
	if len(o.Token) > 0 {
		h.token = sha256.Sum256(o.Token)
	}
	if o.Gatherer != nil {
		// A scrape's client that hangs up makes its write fail, as often
		// as it likes: each kind of line at most once a second.
		h.promOpts = promhttp.HandlerOpts{ErrorLog: logthrottle.NewLogLogger(o.Logger, slog.LevelError, o.Now,
			"error encoding and sending metric family", "error gathering metrics")}
		h.scrapes = make(chan struct{}, MaxScrapes)
		h.ownScrapes = h.scrapes
		if len(o.Token) > 0 {
			h.ownScrapes = make(chan struct{}, MaxScrapes)
		}
		h.metrics = o.Gatherer
		h.openMetrics = h.metrics
		if len(o.Token) > 0 && (len(o.KeyMetrics) > 0 || o.KeySeries != nil) {
			h.openMetrics = without{o.Gatherer, o.KeyMetrics, o.KeySeries}
		}
	}
	return h, nil
}

// ServeHTTP routes the request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		// An extended CONNECT (RFC 8441), which Go's HTTP/2 server takes
		// under GODEBUG=http2xconnect=1, or a plain one with a path
		// (CONNECT /v1/forward-auth over HTTP/1.1): forward auth would
		// take its method as the request's, decide on it, and answer
		// 2xx, which opens the tunnel. Refused on every path, before
		// anything.
		if r.Header[":protocol"] != nil {
			h.fail(w, errExtendedConnect)
		} else {
			h.fail(w, errConnect)
		}
		return
	}
	if len(h.o.Token) > 0 && (strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/json") && !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		h.fail(w, errUnauthorized)
		return
	}
	if (strings.HasPrefix(r.URL.Path, "/v1/") && r.URL.Path != "/v1/forward-auth" || r.URL.Path == "/json" || r.URL.Path == "/metrics") && fromPage(r) {
		// A browser sent it for a web page (a text/plain POST needs no
		// CORS preflight): refused before it spends anything, or shows
		// the rules or clients' keys (the hot keys of /metrics) to a
		// page that can read it. Forward auth is exempt: its Origin and
		// Sec-Fetch-Site are the client's, passed on by the gateway.
		h.fail(w, errCrossOrigin)
		return
	}
	switch r.URL.Path {
	case "/v1/check":
		if r.Method != http.MethodPost {
			h.fail(w, errMethod(http.MethodPost))
			return
		}
		h.check(w, r, false)
	case "/v1/report":
		if r.Method != http.MethodPost {
			h.fail(w, errMethod(http.MethodPost))
			return
		}
		h.check(w, r, true)
	case "/v1/forward-auth":
		h.forwardAuth(w, r)
	case "/json":
		if h.o.Envoy == nil {
			h.fail(w, errNotFound)
			return
		}
		h.o.Envoy.ServeJSON(w, r)
	case "/v1/rules":
		if !getOrHead(r) {
			h.fail(w, errMethod("GET, HEAD"))
			return
		}
		h.rules(w, r)
	case "/healthcheck":
		if h.o.Envoy == nil {
			h.fail(w, errNotFound)
			return
		}
		if !getOrHead(r) {
			h.fail(w, errMethod("GET, HEAD"))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("OK"))
	case "/healthz":
		if !getOrHead(r) {
			h.fail(w, errMethod("GET, HEAD"))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	case "/readyz":
		if !getOrHead(r) {
			h.fail(w, errMethod("GET, HEAD"))
			return
		}
		h.ready(w, r)
	case "/metrics":
		if h.metrics == nil {
			h.fail(w, errNotFound)
			return
		}
		if !getOrHead(r) {
			h.fail(w, errMethod("GET, HEAD"))
			return
		}
		if len(h.o.Token) > 0 && !h.authorized(r) {
			h.scrape(w, r, h.openMetrics, h.scrapes)
			return
		}
		h.scrape(w, r, h.metrics, h.ownScrapes)
	case "/v1/hotkeys":
		if h.o.HotKeys == nil {
			h.fail(w, errNotFound)
			return
		}
		h.o.HotKeys.ServeHTTP(w, r)
	default:
		if h.o.Deferred != nil && strings.HasPrefix(r.URL.Path, "/v1/deferred/") {
			h.o.Deferred.ServeHTTP(w, r)
			return
		}
		h.fail(w, errNotFound)
	}
}

// fromPage reports whether a browser sent r for a web page (a fetch, a
// form, an image): Sec-Fetch-Site other than "none" (a URL typed in the
// address bar), or without it (an older browser) an Origin. Same-origin
// pages too: the decision API serves none, so a page of its host name is
// one whose site rebound that name to the API's address (DNS rebinding),
// and it could read the answers. Programs send neither header.
func fromPage(r *http.Request) bool {
	// The map indexed with the names in canonical form, as both servers
	// key it: Header.Get would canonicalize them anew on every request.
	switch site := first(r.Header["Sec-Fetch-Site"]); site {
	case "":
		return first(r.Header["Origin"]) != ""
	default:
		return site != "none"
	}
}

// first is a header's first value, "" when none: Header.Get's answer for
// a name in canonical form.
func first(vv []string) string {
	if len(vv) == 0 {
		return ""
	}
	return vv[0]
}

func getOrHead(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	if h.o.Ready != nil {
		if err := h.askReady(r); err != nil {
			msg := "not ready: " + err.Error()
			if len(h.o.Token) > 0 && !h.authorized(r) {
				// The store's error (its address, its state) is for
				// the operator: /readyz is open to anyone.
				msg = "not ready: the store does not answer (send the token of api.token_file to see why)"
			}
			h.fail(w, &apiError{status: http.StatusServiceUnavailable, msg: msg})
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ready\n"))
}

// askReady asks Options.Ready, or, while another /readyz is asking it,
// waits for that answer: /readyz is open to anyone and each question goes
// to the store (CLUSTER INFO of every node on a Cluster), so those in
// progress at once share one. The question is bounded by ReadyTimeout,
// not by the asker's connection, whose answer the others wait for.
func (h *Handler) askReady(r *http.Request) error {
	h.readyMu.Lock()
	if c := h.readyCall; c != nil {
		h.readyMu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
	c := &readyCall{done: make(chan struct{})}
	h.readyCall = c
	h.readyMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.o.ReadyTimeout)
	c.err = h.o.Ready(ctx)
	cancel()
	h.readyMu.Lock()
	h.readyCall = nil
	h.readyMu.Unlock()
	close(c.done)
	return c.err
}

// without gathers g but the families named in names, and the series
// series reports (nil: none).
type without struct {
	g      prometheus.Gatherer
	names  []string
	series func(family string, labels []*dto.LabelPair) bool
}

func (w without) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := w.g.Gather()
	return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool {
		if slices.Contains(w.names, mf.GetName()) {
			return true
		}
		if w.series == nil {
			return false
		}
		// Gather builds the families anew for each call: this one's
		// series are ours to drop.
		mf.Metric = slices.DeleteFunc(mf.Metric, func(m *dto.Metric) bool { return w.series(mf.GetName(), m.GetLabel()) })
		return len(mf.Metric) == 0
	}), err
}

// scrape answers a /metrics scrape from g once one of places (MaxScrapes)
// is free, or not at all if its client leaves first: a scrape whose
// client has gone costs no Gather, and the scrapes after it, the
// scraper's next, do not wait for it. Only the gathering holds the place:
// a client slow to read its answer holds none. With Token, the scrapes
// carrying it have places of their own, so that anonymous ones cannot
// hold Prometheus' back.
func (h *Handler) scrape(w http.ResponseWriter, r *http.Request, g prometheus.Gatherer, places chan struct{}) {
	select {
	case places <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	p := &placed{g: g, places: places}
	defer p.free()
	if r.Context().Err() != nil {
		return // gone as the place freed (select chose the place)
	}
	promhttp.HandlerFor(p, h.promOpts).ServeHTTP(w, r)
}

// placed gathers from g and then frees its place in places (see scrape).
type placed struct {
	g      prometheus.Gatherer
	places chan struct{}
	once   sync.Once
}

func (p *placed) free() { p.once.Do(func() { <-p.places }) }

func (p *placed) Gather() ([]*dto.MetricFamily, error) {
	defer p.free()
	return p.g.Gather()
}
