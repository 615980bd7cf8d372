package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// proxyConfig is a config with the decision API and a proxy on :0 in
// front of upstream, followed by extra (YAML at top level: rules, …).
func proxyConfig(upstream, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
proxy:
  listen: 127.0.0.1:0
  upstream: %s
%s`, upstream, extra)
}

func TestProxyLimitsAndHeaders(t *testing.T) {
	up := startUpstream(t)
	td := startDaemonAligned(t, proxyConfig(up.url, `
rules:
  - name: per-ip
    match: {path: /api/*}
    key: [ip]
    rate: 3/m
    algorithm: fixed_window
`))
	for i := range 3 {
		r := get(t, td.proxy+"/api/x")
		if r.status != http.StatusOK || r.body != "upstream says hi" {
			t.Fatalf("GET /api/x #%d: %d %q, want 200 from the upstream", i+1, r.status, r.body)
		}
		if got, want := r.header.Get("X-RateLimit-Limit"), "3"; got != want {
			t.Errorf("GET /api/x #%d: X-RateLimit-Limit %q, want %q", i+1, got, want)
		}
		if got, want := r.header.Get("X-RateLimit-Remaining"), strconv.Itoa(2-i); got != want {
			t.Errorf("GET /api/x #%d: X-RateLimit-Remaining %q, want %q", i+1, got, want)
		}
		if r.header.Get("X-RateLimit-Reset") == "" || r.header.Get("RateLimit") == "" || r.header.Get("RateLimit-Policy") == "" {
			t.Errorf("GET /api/x #%d: missing reset or IETF headers: %v", i+1, r.header)
		}
	}
	r := get(t, td.proxy+"/api/x")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("GET /api/x #4: status %d, want 429", r.status)
	}
	var body struct {
		Error        string `json:"error"`
		Rule         string `json:"rule"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Error != "rate_limited" || body.Rule != "per-ip" || body.RetryAfterMS <= 0 {
		t.Errorf("GET /api/x #4: body %q (%v), want rate_limited by per-ip with retry_after_ms > 0", r.body, err)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("GET /api/x #4: Retry-After %q, want 1..60 seconds", r.header.Get("Retry-After"))
	}
	if got := r.header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("GET /api/x #4: X-RateLimit-Remaining %q, want 0", got)
	}
	if got := up.count(); got != 3 {
		t.Errorf("upstream got %d requests, want 3: a limited request must never reach it", got)
	}
	// Outside the rule's path: no limit, no headers.
	r = get(t, td.proxy+"/other")
	if r.status != http.StatusOK || r.header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("GET /other: %d with X-RateLimit-Limit %q, want 200 without rate-limit headers", r.status, r.header.Get("X-RateLimit-Limit"))
	}
	if got := td.metric("sluice_decisions_total", "rule", "per-ip", "result", "denied"); got != 1 {
		t.Errorf("sluice_decisions_total{rule=per-ip,result=denied} = %v, want 1", got)
	}
	if got := td.metric("sluice_decisions_total", "rule", "per-ip", "result", "allowed"); got != 3 {
		t.Errorf("sluice_decisions_total{rule=per-ip,result=allowed} = %v, want 3", got)
	}
}

func TestClientIP(t *testing.T) {
	const rule = `
rules:
  - name: per-ip
    key: [ip]
    rate: 1/m
`
	t.Run("spoofed X-Forwarded-For from an untrusted peer is ignored", func(t *testing.T) {
		up := startUpstream(t)
		td := startDaemonAligned(t, proxyConfig(up.url, rule))
		if r := get(t, td.proxy+"/", "X-Forwarded-For", "203.0.113.1"); r.status != http.StatusOK {
			t.Fatalf("first request: status %d, want 200", r.status)
		}
		for _, spoof := range []string{"203.0.113.2", "198.51.100.7, 203.0.113.3"} {
			if r := get(t, td.proxy+"/", "X-Forwarded-For", spoof); r.status != http.StatusTooManyRequests {
				t.Errorf("X-Forwarded-For %q from 127.0.0.1 (untrusted): status %d, want 429 (keyed by 127.0.0.1)", spoof, r.status)
			}
		}
		if r := get(t, td.proxy+"/", "Forwarded", "for=192.0.2.60"); r.status != http.StatusTooManyRequests {
			t.Errorf("Forwarded from 127.0.0.1 (untrusted): status %d, want 429", r.status)
		}
		up.mu.Lock()
		defer up.mu.Unlock()
		if len(up.xff) != 1 || up.xff[0] != "127.0.0.1" {
			t.Errorf("upstream saw X-Forwarded-For %q, want [127.0.0.1]: the spoofed value must not be passed on", up.xff)
		}
	})
	t.Run("X-Forwarded-For from a trusted proxy is honoured", func(t *testing.T) {
		up := startUpstream(t)
		td := startDaemonAligned(t, proxyConfig(up.url, `
client_ip:
  trusted_proxies: [127.0.0.0/8]
`+rule))
		for _, c := range []struct {
			xff  string
			want int
		}{
			{"203.0.113.1", http.StatusOK},
			{"203.0.113.2", http.StatusOK},
			{"203.0.113.1", http.StatusTooManyRequests},
			{"198.51.100.9, 203.0.113.2", http.StatusTooManyRequests}, // rightmost untrusted hop
			{"203.0.113.2, 203.0.113.3", http.StatusOK},
		} {
			if r := get(t, td.proxy+"/", "X-Forwarded-For", c.xff); r.status != c.want {
				t.Errorf("X-Forwarded-For %q from trusted 127.0.0.1: status %d, want %d", c.xff, r.status, c.want)
			}
		}
		up.mu.Lock()
		defer up.mu.Unlock()
		if len(up.xff) == 0 || up.xff[0] != "203.0.113.1" {
			t.Errorf("upstream saw X-Forwarded-For %q, want the resolved client 203.0.113.1 first", up.xff)
		}
	})
}

func TestHeaderKeyedRule(t *testing.T) {
	up := startUpstream(t)
	td := startDaemon(t, proxyConfig(up.url, `
rules:
  - name: per-key
    key: [header:X-API-Key]
    rate: 2/m
    algorithm: token_bucket
`))
	steps := []struct {
		key     string // "" sends no header
		want    int
		headers bool
	}{
		{"alice", 200, true},
		{"alice", 200, true},
		{"alice", 429, true},
		{"bob", 200, true},
		{"", 200, false}, // no key part: the rule does not apply
		{"", 200, false},
		{"", 200, false},
	}
	for i, s := range steps {
		var h []string
		if s.key != "" {
			h = []string{"X-API-Key", s.key}
		}
		r := get(t, td.proxy+"/", h...)
		if r.status != s.want {
			t.Errorf("step %d (X-API-Key %q): status %d, want %d", i, s.key, r.status, s.want)
		}
		if got := r.header.Get("X-RateLimit-Limit") != ""; got != s.headers {
			t.Errorf("step %d (X-API-Key %q): rate-limit headers present %v, want %v", i, s.key, got, s.headers)
		}
	}
}

// TestDelayAction sends a burst at a leaky-bucket delay rule: the admitted
// requests are spread at the rule's spacing instead of being rejected, and
// the one past the queue is rejected. The spacing is asserted from the
// delay the daemon applied (sluice_delay_seconds) and, as a lower bound
// only, from when the upstream saw the requests: timers never fire early,
// so a slow machine can widen the spacing but never narrow it. The spacing
// (500ms) is wide so that the burst's goroutines, however a loaded machine
// schedules them, arrive well within one slot of each other.
func TestDelayAction(t *testing.T) {
	var (
		mu       sync.Mutex
		arrivals []time.Time
	)
	srv := newUpstreamFunc(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	})
	td := startDaemon(t, proxyConfig(srv, `
rules:
  - name: shaped
    key: [ip]
    rate: 2/s
    burst: 4
    algorithm: leaky_bucket
    action: delay
    max_delay: 3s
`))
	const n = 6 // 1 now + 4 queued at 500ms spacing; the 6th overflows
	statuses := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			statuses[i] = get(t, td.proxy+"/").status
		})
	}
	close(start)
	wg.Wait()
	ok, limited := 0, 0
	for _, s := range statuses {
		switch s {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
		}
	}
	// The 6th may find a slot if the goroutines were spread over ≥ 500ms.
	if ok < 5 || ok+limited != n {
		t.Fatalf("statuses %v: want at least 5 × 200 and the rest 429", statuses)
	}
	if got := td.metric("sluice_delay_seconds"); got < 4 {
		t.Errorf("sluice_delay_seconds count = %v, want ≥ 4 delayed requests", got)
	}
	mu.Lock()
	defer mu.Unlock()
	first, last := arrivals[0], arrivals[0]
	for _, a := range arrivals {
		if a.Before(first) {
			first = a
		}
		if a.After(last) {
			last = a
		}
	}
	// 5 admitted at 500ms spacing span 2s; allow up to 500ms of the first
	// request's own scheduling lateness out of it.
	if span := last.Sub(first); span < 1500*time.Millisecond {
		t.Errorf("upstream saw the burst over %v, want ≥ 1.5s (5 requests at 500ms spacing)", span)
	}
}

func newUpstreamFunc(t *testing.T, f http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestShadowMode(t *testing.T) {
	up := startUpstream(t)
	td := startDaemonAligned(t, proxyConfig(up.url, `
rules:
  - name: watching
    key: [ip]
    rate: 1/m
    action: shadow
`))
	for i := range 3 {
		if r := get(t, td.proxy+"/"); r.status != http.StatusOK {
			t.Errorf("GET #%d under a shadow rule: status %d, want 200", i+1, r.status)
		}
	}
	if got := up.count(); got != 3 {
		t.Errorf("upstream got %d, want 3: shadow never blocks", got)
	}
	if got := td.metric("sluice_decisions_total", "rule", "watching", "result", "shadow_denied"); got != 2 {
		t.Errorf("sluice_decisions_total{rule=watching,result=shadow_denied} = %v, want 2", got)
	}
}

func TestDecisionAPI(t *testing.T) {
	td := startDaemon(t, `
listen: 127.0.0.1:0
rules:
  - name: api
    rate: 2/m
    algorithm: token_bucket
`)
	for i, want := range []checkAnswer{
		{Allowed: true, Limit: 2, Remaining: 1},
		{Allowed: true, Limit: 2, Remaining: 0},
		{Allowed: false, Limit: 2, Remaining: 0},
	} {
		got, status := check(t, td.api, "api", "user-1", 1)
		if status != http.StatusOK || got.Allowed != want.Allowed || got.Limit != want.Limit || got.Remaining != want.Remaining {
			t.Errorf("POST /v1/check #%d: %d %+v, want 200 %+v", i+1, status, got, want)
		}
		if !got.Allowed && got.RetryAfterMS <= 0 {
			t.Errorf("POST /v1/check #%d: denied with retry_after_ms %d, want > 0", i+1, got.RetryAfterMS)
		}
	}
	if got, _ := check(t, td.api, "api", "user-2", 1); !got.Allowed {
		t.Errorf("POST /v1/check for another key: %+v, want allowed", got)
	}
	for _, body := range []string{`{`, `{"rule":"nope","key":"k","cost":1}`, `{"rule":"api","key":"k","cost":-1}`} {
		r := do(t, http.MethodPost, td.api+"/v1/check", body)
		if r.status/100 != 4 || !strings.Contains(r.body, `"error"`) {
			t.Errorf("POST /v1/check %s: %d %q, want 4xx with a JSON error", body, r.status, r.body)
		}
	}
	r := get(t, td.api+"/v1/rules")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"api"`) {
		t.Errorf("GET /v1/rules: %d %q, want 200 listing rule api", r.status, r.body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := get(t, td.api+path); r.status != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, r.status)
		}
	}
	r = get(t, td.api+"/metrics")
	for _, name := range []string{"sluice_decisions_total", "sluice_decision_duration_seconds", "sluice_config_reloads_total", "sluice_store_errors_total"} {
		if !strings.Contains(r.body, name) {
			t.Errorf("GET /metrics: no %s", name)
		}
	}
}

// TestTwoDaemonsShareRedis: two daemons on one real Redis admit exactly
// the limit between them.
func TestTwoDaemonsShareRedis(t *testing.T) {
	rs := redistest.StartServer(t)
	cfg := fmt.Sprintf(`
listen: 127.0.0.1:0
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
rules:
  - name: shared
    rate: 10/h
    algorithm: sliding_window_log
`, rs.Addr)
	a, b := startDaemon(t, cfg), startDaemon(t, cfg)
	var (
		mu      sync.Mutex
		allowed int
		wg      sync.WaitGroup
	)
	for i := range 40 {
		api := a.api
		if i%2 == 1 {
			api = b.api
		}
		wg.Go(func() {
			got, status := check(t, api, "shared", "tenant", 1)
			if status != http.StatusOK {
				t.Errorf("POST /v1/check: status %d", status)
			}
			if got.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 10 {
		t.Errorf("two daemons admitted %d of 40, want exactly 10", allowed)
	}
}

// TestForwardAuth asks /v1/forward-auth as a gateway in client_ip's trusted
// proxies would, then reloads forward_auth.deny_status and client_ip live.
func TestForwardAuth(t *testing.T) {
	const base = `
listen: 127.0.0.1:0
client_ip:
  trusted_proxies: [127.0.0.0/8]
forward_auth:
  deny_status: 403
rules:
  - name: per-client
    match: {path: /api/*}
    key: [ip]
    rate: 1/m
    algorithm: fixed_window
`
	td := startDaemonAligned(t, base)
	ask := func(client, uri string) int {
		return do(t, http.MethodGet, td.api+"/v1/forward-auth", "",
			"X-Forwarded-For", client, "X-Forwarded-Method", "GET", "X-Forwarded-Uri", uri).status
	}
	for _, c := range []struct {
		client, uri string
		want        int
	}{
		{"203.0.113.5", "/api/a", http.StatusOK},
		{"203.0.113.5", "/api/b", http.StatusForbidden}, // deny_status
		{"203.0.113.6", "/api/a", http.StatusOK},        // another client, by X-Forwarded-For
		{"203.0.113.5", "/public", http.StatusOK},       // no rule applies
	} {
		if got := ask(c.client, c.uri); got != c.want {
			t.Errorf("forward-auth for %s %s: %d, want %d", c.client, c.uri, got, c.want)
		}
	}
	// deny_status reloads live; the rule is unchanged, so its counters
	// (203.0.113.5 used up) carry on.
	replaceFile(t, td.path, strings.Replace(base, "deny_status: 403", "deny_status: 429", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if got := ask("203.0.113.5", "/api/c"); got != http.StatusTooManyRequests {
		t.Errorf("forward-auth after deny_status changed to 429: %d, want 429", got)
	}
	// Trusting nobody: X-Forwarded-For is ignored, every request is the
	// gateway's own (127.0.0.1), a fresh key.
	replaceFile(t, td.path, strings.Replace(base, "trusted_proxies: [127.0.0.0/8]", "trusted_proxies: []", 1))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if got := ask("203.0.113.7", "/api/a"); got != http.StatusOK {
		t.Errorf("forward-auth, untrusted gateway, first: %d, want 200", got)
	}
	if got := ask("203.0.113.8", "/api/a"); got != http.StatusForbidden {
		t.Errorf("forward-auth, untrusted gateway, another X-Forwarded-For: %d, want 403 (keyed by the gateway)", got)
	}
}

// TestReloadUpstream: proxy.upstream reloads live, and a rule left alone
// keeps its counters across the rebuilt proxy.
func TestReloadUpstream(t *testing.T) {
	a, b := startUpstream(t), startUpstream(t)
	const rule = `
rules:
  - name: per-ip
    key: [ip]
    rate: 3/m
    algorithm: fixed_window
`
	td := startDaemonAligned(t, proxyConfig(a.url, rule))
	if r := get(t, td.proxy+"/"); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("via upstream a: %d remaining %q, want 200 remaining 2", r.status, r.header.Get("X-RateLimit-Remaining"))
	}
	replaceFile(t, td.path, proxyConfig(b.url, rule))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	if r := get(t, td.proxy+"/"); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("via upstream b: %d remaining %q, want 200 remaining 1 (counter kept)", r.status, r.header.Get("X-RateLimit-Remaining"))
	}
	if a.count() != 1 || b.count() != 1 {
		t.Errorf("upstream a got %d, b got %d; want 1 each", a.count(), b.count())
	}
}
