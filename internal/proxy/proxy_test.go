package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/h1"
	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
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
	e, err := engine.New(engine.Options{Store: s.store, Rules: set, OnError: s.onError, Metrics: m})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	up := s.up
	if up == nil {
		up = newUpstream(t)
	}
	u, _ := url.Parse(up.srv.URL + s.base)
	p, err := proxy.New(proxy.Options{Upstream: u, Engine: func() *engine.Engine { return e },
		ClientIP: clientip.Resolver{Trusted: s.trusted}, PreserveHost: s.preserve, ResponseHeaderTimeout: s.timeout})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	return &fixture{proxy: serve(t, p, m), up: up, reg: reg}
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

func TestRejectAndHeaders(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "per-ip", Match: rules.MatchSpec{Path: "/api/*"}, Rate: "3/m", Algorithm: "fixed_window"},
	}})
	for i, want := range []int{200, 200, 200, 429, 429} {
		resp, body := get(t, f.proxy.URL+"/api/x", nil)
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %q, want %d", i, resp.StatusCode, body, want)
		}
		if got := resp.Header.Values("X-RateLimit-Limit"); len(got) != 1 || got[0] != "3" {
			t.Errorf("request %d: X-RateLimit-Limit %q, want exactly [3] (the upstream's replaced)", i, got)
		}
		if wantRem := fmt.Sprint(max(2-i, 0)); resp.Header.Get("X-RateLimit-Remaining") != wantRem {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %s", i, resp.Header.Get("X-RateLimit-Remaining"), wantRem)
		}
		if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") != `"per-ip";q=3;w=60` {
			t.Errorf("request %d: RateLimit %q RateLimit-Policy %q", i, resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"))
		}
		if want == 429 {
			if !strings.HasPrefix(body, `{"error":"rate_limited","rule":"per-ip","retry_after_ms":`) || resp.Header.Get("Retry-After") == "" {
				t.Errorf("request %d: 429 body %q Retry-After %q", i, body, resp.Header.Get("Retry-After"))
			}
			if got := resp.Header.Values("X-RateLimit-Retry-After"); len(got) != 1 || got[0] != resp.Header.Get("Retry-After") {
				t.Errorf("request %d: X-RateLimit-Retry-After %q, want exactly Retry-After's %q", i, got, resp.Header.Get("Retry-After"))
			}
		} else if got := resp.Header.Get("X-RateLimit-Retry-After"); got != "" {
			t.Errorf("request %d: allowed answer with X-RateLimit-Retry-After %q", i, got)
		}
	}
	if got := f.up.hits.Load(); got != 3 {
		t.Errorf("upstream hits = %d, want 3: limited requests must never reach it", got)
	}
	// No rule applies outside /api/: no headers but the upstream's.
	if resp, _ := get(t, f.proxy.URL+"/other", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "999" || resp.Header.Get("RateLimit") != "" {
		t.Errorf("GET /other: %d headers %v, want 200 with only the upstream's headers", resp.StatusCode, resp.Header)
	}
}

// Denied by one rule consumes nothing from the others; headers carry the
// tightest rule.
func TestSeveralRules(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "all", Match: rules.MatchSpec{Path: "/api/*"}, Rate: "10/m"},
		{Name: "expensive", Match: rules.MatchSpec{Path: "/api/expensive"}, Rate: "1/m"},
	}})
	resp, _ := get(t, f.proxy.URL+"/api/expensive", nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "1" || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("first /api/expensive: %d limit %q remaining %q, want 200 with the tightest rule (expensive: 1, 0 left)",
			resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"))
	}
	resp, body := get(t, f.proxy.URL+"/api/expensive", nil)
	if resp.StatusCode != 429 || !strings.Contains(body, `"rule":"expensive"`) {
		t.Errorf("second /api/expensive: %d %q, want 429 by expensive", resp.StatusCode, body)
	}
	resp, _ = get(t, f.proxy.URL+"/api/cheap", nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "8" {
		t.Errorf("/api/cheap after a denied request: %d remaining %q, want 200 with 8 left (the denied request consumed nothing from all)",
			resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	if f.up.hits.Load() != 2 {
		t.Errorf("upstream hits = %d, want 2", f.up.hits.Load())
	}
}

func TestShadowForwardsAndCounts(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "watch", Rate: "1/m", Action: "shadow"},
	}})
	for i := range 3 {
		if resp, _ := get(t, f.proxy.URL+"/x", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "999" {
			t.Errorf("request %d under a shadow rule: %d limit %q, want 200 with no proxy headers", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
		}
	}
	if f.up.hits.Load() != 3 {
		t.Errorf("upstream hits = %d, want 3", f.up.hits.Load())
	}
	if got := counter(t, f.reg, "sluice_decisions_total", map[string]string{"rule": "watch", "result": "shadow_denied"}); got != 2 {
		t.Errorf("shadow_denied for watch = %v, want 2", got)
	}
}

func counter(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

func TestForwardingHeaders(t *testing.T) {
	spec := []rules.Spec{{Name: "per-ip", Rate: "2/m"}}
	t.Run("untrusted peer: a spoofed X-Forwarded-For changes nothing", func(t *testing.T) {
		f := start(t, setup{specs: spec})
		for i, want := range []int{200, 200, 429} {
			// A new spoofed address each time: still one client.
			resp, _ := get(t, f.proxy.URL+"/p", map[string]string{"X-Forwarded-For": fmt.Sprintf("10.0.0.%d", i), "Forwarded": "for=10.9.9.9"})
			if resp.StatusCode != want {
				t.Errorf("request %d with a spoofed X-Forwarded-For: %d, want %d", i, resp.StatusCode, want)
			}
		}
		f.up.mu.Lock()
		defer f.up.mu.Unlock()
		if got := f.up.last.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("upstream X-Forwarded-For = %q, want [127.0.0.1]", got)
		}
		if got := f.up.last.Header.Get("Forwarded"); got != "" {
			t.Errorf("upstream Forwarded = %q, want it dropped", got)
		}
		u, _ := url.Parse(f.up.srv.URL)
		if f.up.last.Host != u.Host || f.up.last.Header.Get("X-Forwarded-Host") != strings.TrimPrefix(f.proxy.URL, "http://") {
			t.Errorf("upstream Host %q X-Forwarded-Host %q, want the upstream's host and the original", f.up.last.Host, f.up.last.Header.Get("X-Forwarded-Host"))
		}
		if f.up.last.Header.Get("X-Forwarded-Proto") != "http" {
			t.Errorf("upstream X-Forwarded-Proto = %q, want http", f.up.last.Header.Get("X-Forwarded-Proto"))
		}
	})
	t.Run("trusted peer: the client from X-Forwarded-For", func(t *testing.T) {
		f := start(t, setup{specs: spec, trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, preserve: true})
		for i, c := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.1"} {
			resp, _ := get(t, f.proxy.URL+"/p", map[string]string{"X-Forwarded-For": c, "Host": "app.example"})
			if resp.StatusCode != 200 {
				t.Errorf("request %d from %s: %d, want 200 (2 per client)", i, c, resp.StatusCode)
			}
		}
		f.up.mu.Lock()
		defer f.up.mu.Unlock()
		if got := f.up.last.Header.Get("X-Forwarded-For"); got != "203.0.113.1" {
			t.Errorf("upstream X-Forwarded-For = %q, want 203.0.113.1", got)
		}
		if f.up.last.Host != "app.example" || f.up.last.Header.Get("X-Forwarded-Host") != "app.example" {
			t.Errorf("PreserveHost: upstream Host %q X-Forwarded-Host %q, want app.example for both", f.up.last.Host, f.up.last.Header.Get("X-Forwarded-Host"))
		}
	})
}

// The response streams: the client reads the first chunk while the
// upstream is still writing.
func TestStreaming(t *testing.T) {
	release := make(chan struct{})
	up := &upstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	}))
	t.Cleanup(up.srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up})
	resp, err := http.Get(f.proxy.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q %v, want it before the upstream finishes", line, err)
	}
	close(release)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Errorf("rest of the stream: %q", rest)
	}
	if resp.Header.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("streamed response X-RateLimit-Limit %q, want 10", resp.Header.Get("X-RateLimit-Limit"))
	}
}

// An Upgrade request (as WebSocket uses) passes through both ways.
func TestUpgrade(t *testing.T) {
	up := &upstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", 400)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo: " + line)
			brw.Flush()
		}
	}))
	t.Cleanup(up.srv.Close)
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade response: %v %v, want 101", resp, err)
	}
	if resp.Header.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("101 X-RateLimit-Limit %q, want 10", resp.Header.Get("X-RateLimit-Limit"))
	}
	for _, msg := range []string{"ping\n", "pong\n"} {
		io.WriteString(conn, msg)
		got, err := br.ReadString('\n')
		if err != nil || got != "echo: "+msg {
			t.Errorf("over the upgraded connection: sent %q, got %q %v", msg, got, err)
		}
	}
}

// Action delay smooths a burst: requests reach the upstream period/rate
// apart (timers never fire early, so the gaps have a floor), and the one
// beyond the queue gets 429. Exact timings are tested in package engine
// with testing/synctest.
func TestDelaySmoothsBurst(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "smooth", Rate: "20/s", Burst: 3, Action: "delay", MaxDelay: time.Second, Algorithm: "leaky_bucket"},
	}})
	// The queue (3 behind the one leaving now) takes 4; a 5th arriving at
	// once waits for a slot; max_delay 1s covers it, so all 5 pass.
	const n = 5
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			resp, _ := get(t, f.proxy.URL+"/burst", nil)
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	// The 5th slot is 4 × 50ms after the first decision, itself after start.
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("a burst of %d at 20/s passed in %v, want at least 200ms (shaped, not let through)", n, took)
	}
	for i, c := range codes {
		if c != 200 {
			t.Errorf("burst request %d: %d, want 200 (delayed, not rejected)", i, c)
		}
	}
	f.up.mu.Lock()
	at := append([]time.Time(nil), f.up.at...)
	f.up.mu.Unlock()
	if len(at) != n {
		t.Fatalf("upstream saw %d requests, want %d", len(at), n)
	}
	// At the upstream the requests arrive spread over ~200ms (slots 50ms
	// apart, give or take the forwarding time of the first and the last).
	if span := at[n-1].Sub(at[0]); span < 150*time.Millisecond {
		t.Errorf("burst of %d reached the upstream within %v, want spread over ~200ms", n, span)
	}
}

func TestDelayOverMaxDelayRejects(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "slow", Rate: "1/m", Action: "delay", MaxDelay: 10 * time.Millisecond, Algorithm: "fixed_window"},
	}})
	get(t, f.proxy.URL+"/", nil)
	resp, body := get(t, f.proxy.URL+"/", nil)
	if resp.StatusCode != 429 || !strings.Contains(body, `"rule":"slow"`) {
		t.Errorf("request needing a minute under max_delay 10ms: %d %q, want 429", resp.StatusCode, body)
	}
	if f.up.hits.Load() != 1 {
		t.Errorf("upstream hits = %d, want 1", f.up.hits.Load())
	}
}

func TestStoreDown(t *testing.T) {
	srv := redistest.StartServer(t)
	store, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(store.Close)
	spec := []rules.Spec{{Name: "r", Rate: "100/s"}}
	allow := start(t, setup{specs: spec, store: store, onError: "allow"})
	deny := start(t, setup{specs: spec, store: store, onError: "deny"})
	if resp, _ := get(t, deny.proxy.URL+"/", nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "100" {
		t.Fatalf("with Redis up: %d, want 200 with headers", resp.StatusCode)
	}
	srv.Stop()
	if resp, _ := get(t, allow.proxy.URL+"/", nil); resp.StatusCode != 200 || allow.up.hits.Load() != 1 {
		t.Errorf("on_error allow, Redis down: %d, upstream hits %d; want 200 forwarded", resp.StatusCode, allow.up.hits.Load())
	}
	resp, body := get(t, deny.proxy.URL+"/", nil)
	if resp.StatusCode != 503 || body != "{\"error\":\"store_unavailable\"}\n" || deny.up.hits.Load() != 1 {
		t.Errorf("on_error deny, Redis down: %d %q, upstream hits %d; want 503 store_unavailable, not forwarded", resp.StatusCode, body, deny.up.hits.Load())
	}
}

func TestUpstreamDown(t *testing.T) {
	up := newUpstream(t)
	up.srv.Close()
	up.srv.URL = "http://" + refusedAddr(t) // not the closed port: the proxy's own listener could take it
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up})
	resp, body := get(t, f.proxy.URL+"/", nil)
	if resp.StatusCode != 502 || body != "{\"error\":\"bad_gateway\"}\n" || resp.Header.Get("X-RateLimit-Remaining") != "9" {
		t.Errorf("upstream down: %d %q remaining %q, want 502 bad_gateway with the rule's headers (9 left)", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
	}
}

func TestUpstreamTimeout(t *testing.T) {
	hung := make(chan struct{})
	up := &upstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.srv.Close)
	t.Cleanup(func() { close(hung) })
	f := start(t, setup{specs: []rules.Spec{{Name: "r", Rate: "10/s"}}, up: up, timeout: 50 * time.Millisecond})
	resp, body := get(t, f.proxy.URL+"/", nil)
	if resp.StatusCode != 504 || body != "{\"error\":\"gateway_timeout\"}\n" {
		t.Errorf("upstream silent past ResponseHeaderTimeout: %d %q, want 504 gateway_timeout", resp.StatusCode, body)
	}
}

// TestPathSpellings: once /login is spent, no other spelling of it reaches
// the upstream; an allowed request reaches it with its path as sent.
func TestPathSpellings(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "login", Match: rules.MatchSpec{Path: "/login"}, Rate: "1/m", Algorithm: "fixed_window"},
		{Name: "admin", Match: rules.MatchSpec{Path: "/admin/*", CaseInsensitive: true}, Rate: "1/m", Algorithm: "fixed_window"},
	}})
	if resp, body := get(t, f.proxy.URL+"/login;v=1", nil); resp.StatusCode != 200 {
		t.Fatalf("GET /login;v=1: %d %q, want 200", resp.StatusCode, body)
	}
	f.up.mu.Lock()
	got := f.up.last.RequestURI
	f.up.mu.Unlock()
	if got != "/login;v=1" {
		t.Errorf("upstream saw %q, want the path as sent, /login;v=1", got)
	}
	for _, sp := range []string{"/login", "/login/", "/login;x", "/Login;x/../login", "/%6Cogin", "/login%2f", "/login%2F",
		"//login", "/./login", "/a/../login", "/a/..;/login", "/%252e%252e/login", "/%256Cogin", "/login%5C"} {
		if resp, body := get(t, f.proxy.URL+sp, nil); resp.StatusCode != 429 || !strings.Contains(body, `"rule":"login"`) {
			t.Errorf("GET %s after /login was spent: %d %q, want 429 from rule login", sp, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, f.proxy.URL+"/Admin/Users", nil); resp.StatusCode != 200 {
		t.Fatalf("GET /Admin/Users: %d, want 200", resp.StatusCode)
	}
	for _, sp := range []string{"/admin/users", "/ADMIN", "/admin;x/x", "/%41DMIN/x"} {
		if resp, _ := get(t, f.proxy.URL+sp, nil); resp.StatusCode != 429 {
			t.Errorf("GET %s after the case-insensitive /admin/* was spent: %d, want 429", sp, resp.StatusCode)
		}
	}
	if got := f.up.hits.Load(); got != 2 {
		t.Errorf("upstream hits = %d, want 2", got)
	}
}

// TestIPv6Prefix: through a trusted proxy, twenty addresses of one /64 share
// one per-ip counter; an address of the next /64 has its own; the upstream
// still sees each client's full address.
func TestIPv6Prefix(t *testing.T) {
	f := start(t, setup{
		specs:   []rules.Spec{{Name: "per-ip", Rate: "10/h", Algorithm: "fixed_window"}},
		trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	})
	passed := 0
	for i := range 20 {
		addr := fmt.Sprintf("2001:db8:5:6:%x::%x", i*977, i+1)
		resp, _ := get(t, f.proxy.URL+"/x", map[string]string{"X-Forwarded-For": addr})
		if resp.StatusCode == 200 {
			passed++
			f.up.mu.Lock()
			xff := f.up.last.Header.Get("X-Forwarded-For")
			f.up.mu.Unlock()
			if xff != netip.MustParseAddr(addr).String() {
				t.Errorf("upstream X-Forwarded-For %q, want the full address %s", xff, addr)
			}
		}
	}
	if passed != 10 {
		t.Errorf("20 addresses of one /64 against 10/h: %d passed, want 10", passed)
	}
	if resp, _ := get(t, f.proxy.URL+"/x", map[string]string{"X-Forwarded-For": "2001:db8:5:7::1"}); resp.StatusCode != 200 {
		t.Errorf("an address of the next /64: %d, want 200", resp.StatusCode)
	}
	// IPv4-mapped IPv6 counts as IPv4.
	for i, want := range []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429} {
		addr := "192.0.2.9"
		if i%2 == 1 {
			addr = "::ffff:192.0.2.9"
		}
		if resp, _ := get(t, f.proxy.URL+"/x", map[string]string{"X-Forwarded-For": addr}); resp.StatusCode != want {
			t.Fatalf("request %d from %s: %d, want %d", i, addr, resp.StatusCode, want)
		}
	}
}

// A client that goes away while its request is held by action delay ends
// the wait: the request never reaches the upstream and the connection is
// let go (on the h1 front, which watches the connection for that wait).
func TestDelayClientGone(t *testing.T) {
	f := start(t, setup{specs: []rules.Spec{
		{Name: "slow", Rate: "1/m", Action: "delay", MaxDelay: 2 * time.Minute, Algorithm: "fixed_window"},
	}})
	if resp, _ := get(t, f.proxy.URL+"/first", nil); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	open := func() float64 {
		mfs, _ := f.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sluice_connections_open" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	before := open() // the first request's keep-alive connection
	c, err := net.Dial("tcp", f.proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /held HTTP/1.1\r\nHost: x\r\n\r\n") // held up to a minute
	for open() != before+1 {
		runtime.Gosched() // until accepted
	}
	c.Close()
	deadline := time.Now().Add(30 * time.Second) // a bound, not a threshold: the wait is a minute
	for open() != before {
		if time.Now().After(deadline) {
			t.Fatal("the held request of a client that went away still holds its connection")
		}
		runtime.Gosched()
	}
	if n := f.up.hits.Load(); n != 1 {
		t.Errorf("upstream got %d requests; want 1 (the held one abandoned)", n)
	}
}
