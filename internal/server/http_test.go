package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

var testSpecs = []rules.Spec{
	{Name: "api", Key: []string{"header:X-Api-Key"}, Rate: "3/m", Algorithm: "fixed_window"},
	{Name: "login-per-ip", Match: rules.MatchSpec{Methods: []string{"POST"}, Path: "/login"}, Key: []string{"ip"}, Rate: "2/m", Algorithm: "sliding_window_log"},
	{Name: "watch", Match: rules.MatchSpec{Path: "/watch/*", CaseInsensitive: true}, Rate: "1/h", Action: "shadow"},
	{Name: "shaped", Match: rules.MatchSpec{Path: "/slow"}, Rate: "10/s", Burst: 5, Action: "delay", MaxDelay: time.Second},
}

type fixture struct {
	srv *httptest.Server
	reg *prometheus.Registry
}

func start(t *testing.T, store sluice.Store, onError string, mod func(*server.Options)) *fixture {
	t.Helper()
	set, err := rules.Compile("test.yaml", testSpecs)
	if err != nil {
		t.Fatalf("rules.Compile: %v", err)
	}
	reg := prometheus.NewRegistry()
	e, err := engine.New(engine.Options{Store: store, Rules: set, OnError: onError, Metrics: metrics.New(reg), Now: alignedNow()})
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	o := server.Options{
		Engine:   func() *engine.Engine { return e },
		ClientIP: clientip.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Gatherer: reg,
	}
	if mod != nil {
		mod(&o)
	}
	h, err := server.New(o)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, reg: reg}
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

func do(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

type checkResponse struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	DelayMS      int64 `json:"delay_ms"`
}

func check(t *testing.T, f *fixture, body string) (int, checkResponse) {
	t.Helper()
	resp, b := do(t, "POST", f.srv.URL+"/v1/check", body, map[string]string{"Content-Type": "application/json"})
	var cr checkResponse
	if resp.StatusCode == 200 {
		if resp.ContentLength != int64(len(b)) || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("POST /v1/check %s: Content-Length %d, Content-Type %q for a body of %d bytes, want its length and application/json", body, resp.ContentLength, resp.Header.Get("Content-Type"), len(b))
		}
		dec := json.NewDecoder(strings.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cr); err != nil {
			t.Fatalf("POST /v1/check %s: answer %q does not decode: %v", body, b, err)
		}
	}
	return resp.StatusCode, cr
}

func TestCheck(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	for i, step := range []struct {
		body      string
		allowed   bool
		remaining int64
		retry     bool
	}{
		{`{"rule":"api","key":"k1"}`, true, 2, false},
		{`{"rule":"api","key":"k1","cost":1}`, true, 1, false},
		{`{"rule":"api","key":"k2","cost":2}`, true, 1, false},
		{`{"rule":"api","key":"k1"}`, true, 0, false},
		{`{"rule":"api","key":"k1"}`, false, 0, true},
		{`{"rule":"api","key":"k1","cost":0}`, true, 0, false},
		{`{"rule":"api","key":"k3","cost":2e0}`, true, 1, false}, // a whole number, however spelled
		{`{"rule":"api","key":"k3","cost":0.1e1}`, true, 0, false},
		{`{"rule":"api","key":"k3","cost":1.0}`, false, 0, true},
		{`{"rule":"watch","key":"s"}`, true, 0, false},
		{`{"rule":"watch","key":"s"}`, true, 0, false}, // shadow: never denies
	} {
		status, cr := check(t, f, step.body)
		if status != 200 || cr.Allowed != step.allowed || cr.Remaining != step.remaining || (cr.RetryAfterMS > 0) != step.retry {
			t.Errorf("step %d: POST /v1/check %s = %d %+v, want 200 allowed %v remaining %d retry>0 %v",
				i, step.body, status, cr, step.allowed, step.remaining, step.retry)
		}
		if strings.Contains(step.body, `"api"`) && (cr.Limit != 3 || cr.ResetAfterMS <= 0 || cr.ResetAfterMS > 60000) {
			t.Errorf("step %d: limit %d reset_after_ms %d, want 3 and within the minute", i, cr.Limit, cr.ResetAfterMS)
		}
	}
	// A leaky bucket's shaping delay is reported.
	var last checkResponse
	for range 3 {
		_, last = check(t, f, `{"rule":"shaped","key":"q"}`)
	}
	if !last.Allowed || last.DelayMS <= 100 || last.DelayMS > 200 {
		t.Errorf("third check of a leaky bucket 10/s: %+v, want allowed with delay_ms near 200 (two 100ms slots ahead)", last)
	}
}

func TestCheckBadInput(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		errHas                   string
	}{
		{"bad JSON", "POST", "/v1/check", `{"rule":`, 400, "bad JSON"},
		{"not an object", "POST", "/v1/check", `[1]`, 400, "must be a JSON object"},
		{"key not a string", "POST", "/v1/check", `{"rule":"api","key":7}`, 400, `"key" must be a string`},
		{"null key", "POST", "/v1/check", `{"rule":"api","key":null}`, 400, `"key" must be a string`},
		{"null body", "POST", "/v1/check", `null`, 400, `body must be a JSON object`},
		{"fractional cost", "POST", "/v1/check", `{"rule":"api","key":"k","cost":1.5}`, 400, "whole number"},
		{"fractional cost with an exponent", "POST", "/v1/check", `{"rule":"api","key":"k","cost":15e-1}`, 400, `field "cost" must be a whole number`},
		{"cost 1e400", "POST", "/v1/check", `{"rule":"api","key":"k","cost":1e400}`, 400, `field "cost" is too large (at most 9223372036854775807)`},
		{"cost -1e400", "POST", "/v1/check", `{"rule":"api","key":"k","cost":-1e400}`, 400, "negative"},
		{"cost over int64", "POST", "/v1/check", `{"rule":"api","key":"k","cost":9223372036854775808}`, 400, `field "cost" is too large (at most 9223372036854775807)`},
		{"cost under int64", "POST", "/v1/check", `{"rule":"api","key":"k","cost":-9223372036854775809}`, 400, "negative"},
		{"repeated field", "POST", "/v1/check", `{"rule":"api","key":"k","rule":"login-per-ip"}`, 400, `field "rule" given twice`},
		{"huge unknown rule", "POST", "/v1/check", `{"rule":"` + strings.Repeat("r", 60<<10) + `","key":"k"}`, 400, `… (61440 bytes; a rule name has at most 64); rules are "api", "login-per-ip", "watch", "shaped"`},
		{"unknown field", "POST", "/v1/check", `{"rule":"api","key":"k","costs":1}`, 400, `unknown field "costs" (want "rule", "key" and "cost")`},
		{"huge unknown field", "POST", "/v1/check", `{"` + strings.Repeat("f", 50<<10) + `":1}`, 400, `unknown field "` + strings.Repeat("f", 64) + `"… (51200 bytes)`},
		{"trailing data", "POST", "/v1/check", `{"rule":"api","key":"k"} {}`, 400, "one JSON object"},
		{"empty body", "POST", "/v1/check", ``, 400, "empty body"},
		{"unknown rule", "POST", "/v1/check", `{"rule":"nope","key":"k"}`, 400, `unknown rule "nope"; rules are "api", "login-per-ip", "watch", "shaped"`},
		{"no rule", "POST", "/v1/check", `{"key":"k"}`, 400, "rule"},
		{"empty key", "POST", "/v1/check", `{"rule":"api","key":""}`, 400, "key"},
		{"huge key", "POST", "/v1/check", `{"rule":"api","key":"` + strings.Repeat("x", 5000) + `"}`, 400, "longer than 4096"},
		{"negative cost", "POST", "/v1/check", `{"rule":"api","key":"k","cost":-1}`, 400, "negative"},
		{"cost not a number", "POST", "/v1/check", `{"rule":"api","key":"k","cost":"1"}`, 400, "whole number"},
		{"key not UTF-8", "POST", "/v1/check", "{\"rule\":\"api\",\"key\":\"caf\xe9\"}", 400, `field "key" is not valid UTF-8 (byte 0xe9 at offset 24 of the body)`},
		{"key with a lone surrogate", "POST", "/v1/check", `{"rule":"api","key":"a\udc01b"}`, 400, `field "key" holds \udc01 alone`},
		{"rule not UTF-8", "POST", "/v1/check", "{\"rule\":\"\xff\",\"key\":\"k\"}", 400, `field "rule" is not valid UTF-8`},
		{"field name not UTF-8", "POST", "/v1/check", "{\"k\xffy\":\"k\"}", 400, `a field name is not valid UTF-8`},
		{"field name in another case", "POST", "/v1/check", `{"Rule":"api","key":"k"}`, 400, `unknown field "Rule"`},
		{"body too large", "POST", "/v1/check", `{"rule":"api","key":"k","pad":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "larger than 65536"},
		{"wrong method", "GET", "/v1/check", ``, 405, "method not allowed"},
		{"unknown path", "GET", "/v2/check", ``, 404, "not found"},
		{"rules wrong method", "POST", "/v1/rules", ``, 405, "method not allowed"},
	} {
		resp, body := do(t, tc.method, f.srv.URL+tc.path, tc.body, nil)
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != tc.status || !strings.Contains(e.Error, tc.errHas) {
			t.Errorf("%s: %s %s = %d %q, want %d with an error containing %q", tc.name, tc.method, tc.path, resp.StatusCode, body, tc.status, tc.errHas)
		}
		if resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", tc.name, resp.Header.Get("Content-Type"))
		}
		if tc.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s: 405 without Allow", tc.name)
		}
	}
	// The huge-key rejection and the valid requests above consumed nothing.
	if _, cr := check(t, f, `{"rule":"api","key":"k"}`); cr.Remaining != 2 {
		t.Errorf("after bad requests, first good check of key k: remaining %d, want 2", cr.Remaining)
	}
}

func forwardAuth(t *testing.T, f *fixture, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	return do(t, "GET", f.srv.URL+"/v1/forward-auth", "", hdr)
}

func TestForwardAuth(t *testing.T) {
	for _, denyStatus := range []int{0, 403} {
		f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) { o.DenyStatus = denyStatus })
		want := 429
		if denyStatus != 0 {
			want = denyStatus
		}
		login := map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login?next=/", "X-Forwarded-Host": "app.example", "X-Forwarded-For": "203.0.113.9"}
		for i, wantStatus := range []int{200, 200, want} {
			resp, body := forwardAuth(t, f, login)
			if resp.StatusCode != wantStatus {
				t.Fatalf("deny_status %d: forward-auth %d for POST /login: %d %q, want %d", denyStatus, i, resp.StatusCode, body, wantStatus)
			}
			if resp.Header.Get("X-RateLimit-Limit") != "2" || resp.Header.Get("RateLimit-Policy") != `"login-per-ip";q=2;w=60` {
				t.Errorf("forward-auth %d: headers %v, want login-per-ip's", i, resp.Header)
			}
			if wantStatus != 200 && (!strings.Contains(body, `"rule":"login-per-ip"`) || resp.Header.Get("Retry-After") == "") {
				t.Errorf("limited forward-auth: body %q Retry-After %q", body, resp.Header.Get("Retry-After"))
			}
			if xra := resp.Header.Get("X-RateLimit-Retry-After"); (wantStatus != 200) != (xra != "") || xra != resp.Header.Get("Retry-After") {
				t.Errorf("forward-auth %d (status %d): X-RateLimit-Retry-After %q, Retry-After %q; want equal, on limited answers only", i, wantStatus, xra, resp.Header.Get("Retry-After"))
			}
			// The body's retry_after_ms, for gateways that keep no body.
			if ms := resp.Header.Get("X-RateLimit-Retry-After-Ms"); (wantStatus != 200) != (ms != "") || ms != "" && !strings.Contains(body, `"retry_after_ms":`+ms+`}`) {
				t.Errorf("forward-auth %d (status %d): X-RateLimit-Retry-After-Ms %q, body %q; want the body's retry_after_ms, on limited answers only", i, wantStatus, ms, body)
			}
		}
		// Another client (the gateway is trusted, so its X-Forwarded-For counts).
		other := map[string]string{"X-Original-Method": "POST", "X-Original-URI": "/login", "X-Forwarded-For": "198.51.100.1"}
		if resp, body := forwardAuth(t, f, other); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "1" {
			t.Errorf("forward-auth with X-Original-*, another client: %d %q remaining %q, want 200 with 1 left", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
		}
		// A GET of /login matches no rule: 200 without headers.
		if resp, _ := forwardAuth(t, f, map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/login", "X-Forwarded-For": "203.0.113.9"}); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Errorf("forward-auth GET /login: %d limit %q, want 200 without rate-limit headers", resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
		}
		if resp, _ := forwardAuth(t, f, map[string]string{"X-Forwarded-Method": "GET"}); resp.StatusCode != 400 {
			t.Errorf("forward-auth without a URI: %d, want 400", resp.StatusCode)
		}
		bad := "/" + strings.Repeat("a", 20000) + "%zz"
		if resp, body := forwardAuth(t, f, map[string]string{"X-Forwarded-Uri": bad}); resp.StatusCode != 400 || len(body) > 300 || !strings.Contains(body, `invalid URL escape`) || !strings.Contains(body, "(20004 bytes)") {
			t.Errorf("forward-auth with a 20 kB bad URI: %d, %d bytes %.200q; want 400 with the URI cut", resp.StatusCode, len(body), body)
		}
	}
}

// TestForwardAuthPathSpellings: forward auth reads the path from the
// gateway's headers and matches it in the same canonical form.
func TestForwardAuthPathSpellings(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	for i := 0; i < 2; i++ {
		forwardAuth(t, f, map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-For": "203.0.113.9"})
	}
	// A fragment comes from nginx, whose $request_uri keeps it while nginx
	// and the apps behind it route on the path without it.
	for _, sp := range []string{"/login/", "/login;x", "/%6Cogin", "/login%2F", "//login?x=1", "/x/../login", "/x/..;/login", "/login#x", "/login#/../x", "/x/../login#"} {
		for _, hdr := range []string{"X-Forwarded-Uri", "X-Original-Uri"} {
			resp, body := forwardAuth(t, f, map[string]string{"X-Forwarded-Method": "POST", hdr: sp, "X-Forwarded-For": "203.0.113.9"})
			if resp.StatusCode != 429 || !strings.Contains(body, `"rule":"login-per-ip"`) {
				t.Errorf("forward-auth POST %s (%s) after /login was spent: %d %q, want 429", sp, hdr, resp.StatusCode, body)
			}
		}
	}
}

// TestForwardAuthIPv6Prefix: the addresses of one /64 share login-per-ip's
// counter (2/m); the next /64 has its own.
func TestForwardAuthIPv6Prefix(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	for i, want := range []int{200, 200, 429, 429} {
		addr := "2001:db8:77:1::" + string(rune('a'+i))
		resp, body := forwardAuth(t, f, map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-For": addr})
		if resp.StatusCode != want {
			t.Errorf("forward-auth %d from %s: %d %q, want %d", i, addr, resp.StatusCode, body, want)
		}
	}
	if resp, _ := forwardAuth(t, f, map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-For": "2001:db8:77:2::a"}); resp.StatusCode != 200 {
		t.Errorf("forward-auth from the next /64: %d, want 200", resp.StatusCode)
	}
}

// The key of /v1/check is counted in the rule's namespace, the same
// counter the proxy and forward-auth use for a one-part key.
func TestCheckSharesCounterWithForwardAuth(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	check(t, f, `{"rule":"api","key":"abc","cost":2}`)
	resp, _ := forwardAuth(t, f, map[string]string{"X-Forwarded-Uri": "/anything", "X-Api-Key": "abc"})
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("forward-auth after /v1/check spent 2 of 3: %d remaining %q, want 200 with 0 left", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
}

func TestRulesHealthReadyMetrics(t *testing.T) {
	notReady := errors.New("redis: connection refused")
	var readyErr error
	f := start(t, memstore.New(memstore.Options{}), "", func(o *server.Options) {
		o.Ready = func(context.Context) error { return readyErr }
	})
	resp, body := do(t, "GET", f.srv.URL+"/v1/rules", "", nil)
	var got struct {
		Rules []map[string]any `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 || len(got.Rules) != len(testSpecs) {
		t.Fatalf("GET /v1/rules = %d %q (%v), want 200 with %d rules", resp.StatusCode, body, err, len(testSpecs))
	}
	login := got.Rules[1]
	if login["name"] != "login-per-ip" || login["rate"] != "2/m" || login["algorithm"] != "sliding_window_log" ||
		login["action"] != "reject" || login["burst"] != float64(2) || login["match"].(map[string]any)["path"] != "/login" {
		t.Errorf("GET /v1/rules: login-per-ip = %v", login)
	}
	if m := got.Rules[2]["match"].(map[string]any); m["case_insensitive"] != true {
		t.Errorf("GET /v1/rules: watch's match = %v, want case_insensitive true", m)
	}
	if _, ok := login["match"].(map[string]any)["case_insensitive"]; ok {
		t.Errorf("GET /v1/rules: login-per-ip's match = %v, want no case_insensitive (false)", login["match"])
	}
	if shaped := got.Rules[3]; shaped["max_delay"] != "1s" || shaped["algorithm"] != "leaky_bucket" || shaped["action"] != "delay" {
		t.Errorf("GET /v1/rules: shaped = %v", shaped)
	}

	if resp, _ := do(t, "GET", f.srv.URL+"/healthz", "", nil); resp.StatusCode != 200 {
		t.Errorf("GET /healthz = %d, want 200", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", f.srv.URL+"/readyz", "", nil); resp.StatusCode != 200 {
		t.Errorf("GET /readyz while ready = %d, want 200", resp.StatusCode)
	}
	readyErr = notReady
	if resp, body := do(t, "GET", f.srv.URL+"/readyz", "", nil); resp.StatusCode != 503 || !strings.Contains(body, "connection refused") {
		t.Errorf("GET /readyz while the store is down = %d %q, want 503 naming the reason", resp.StatusCode, body)
	}

	check(t, f, `{"rule":"api","key":"m"}`)
	_, metricsBody := do(t, "GET", f.srv.URL+"/metrics", "", nil)
	for _, want := range []string{
		`sluice_decisions_total{result="allowed",rule="api"} 1`,
		`sluice_store_errors_total 0`,
		`sluice_decision_duration_seconds_bucket`,
		`sluice_config_reloads_total{result="success"} 0`,
		`sluice_config_reloads_total{result="failure"} 0`,
	} {
		if !strings.Contains(metricsBody, want) {
			t.Errorf("GET /metrics after traffic lacks %q", want)
		}
	}
}

// on_error with a real Redis that has stopped.
func TestStoreDown(t *testing.T) {
	srv := redistest.StartServer(t)
	store, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(store.Close)
	allow := start(t, store, "allow", func(o *server.Options) { o.Ready = store.Ping })
	deny := start(t, store, "deny", nil)
	if status, cr := check(t, deny, `{"rule":"api","key":"r"}`); status != 200 || !cr.Allowed || cr.Remaining != 2 {
		t.Fatalf("check with Redis up: %d %+v, want allowed with 2 left", status, cr)
	}
	srv.Stop()
	if status, cr := check(t, allow, `{"rule":"api","key":"r"}`); status != 200 || !cr.Allowed {
		t.Errorf("on_error allow, Redis down: %d %+v, want 200 allowed", status, cr)
	}
	if resp, body := do(t, "POST", deny.srv.URL+"/v1/check", `{"rule":"api","key":"r"}`, nil); resp.StatusCode != 503 || !strings.Contains(body, "store_unavailable") {
		t.Errorf("on_error deny, Redis down: %d %q, want 503 store_unavailable", resp.StatusCode, body)
	}
	if resp, _ := forwardAuth(t, deny, map[string]string{"X-Forwarded-Uri": "/x", "X-Api-Key": "r"}); resp.StatusCode != 503 {
		t.Errorf("forward-auth, on_error deny, Redis down: %d, want 503", resp.StatusCode)
	}
	if resp, body := do(t, "GET", allow.srv.URL+"/readyz", "", nil); resp.StatusCode != 503 {
		t.Errorf("GET /readyz with Redis down: %d %q, want 503", resp.StatusCode, body)
	}
	_, m := do(t, "GET", allow.srv.URL+"/metrics", "", nil)
	if !strings.Contains(m, "sluice_store_errors_total 1") || !strings.Contains(m, `sluice_store_fallback_total{policy="allow"} 1`) {
		t.Errorf("metrics after one failed decision under on_error allow lack the store error / fallback counts")
	}
}

// TestReportHTTP: POST /v1/report charges the cost even past the limit and
// answers like /v1/check; the overage is debt, so /v1/check refuses until
// it drains (here: the window of 3/m ends).
func TestReportHTTP(t *testing.T) {
	t.Parallel() // a store (a Cluster's start, for the cluster kind) and a service of its own
	for _, kind := range []string{"memory", "redis", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			var st sluice.Store
			switch kind {
			case "memory":
				st = memstore.New(memstore.Options{})
			case "redis":
				srv := redistest.StartServer(t)
				s, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				st = s
			case "cluster":
				c := redistest.StartCluster(t)
				s, err := redisstore.New(context.Background(), redisstore.Options{Addrs: c.Addrs, Cluster: true, Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				st = s
			}
			f := start(t, st, "", nil)
			report := func(body string) (int, checkResponse) {
				t.Helper()
				resp, b := do(t, "POST", f.srv.URL+"/v1/report", body, map[string]string{"Content-Type": "application/json"})
				var cr checkResponse
				if resp.StatusCode == 200 {
					dec := json.NewDecoder(strings.NewReader(b))
					dec.DisallowUnknownFields()
					if err := dec.Decode(&cr); err != nil {
						t.Fatalf("POST /v1/report %s: answer %q does not decode: %v", body, b, err)
					}
				}
				return resp.StatusCode, cr
			}
			// A report that fits: as a check of the same cost.
			if status, cr := report(`{"rule":"api","key":"fit","cost":2}`); status != 200 || !cr.Allowed || cr.Remaining != 1 || cr.Limit != 3 {
				t.Fatalf("report of 2 against 3/m = %d %+v, want 200 allowed, remaining 1", status, cr)
			}
			// A report of 5 against 3/m: charged, over.
			sent := time.Now()
			status, cr := report(`{"rule":"api","key":"r1","cost":5}`)
			if status != 200 || cr.Allowed || cr.Remaining != 0 || cr.RetryAfterMS <= 0 || cr.RetryAfterMS > 60000 {
				t.Fatalf("report of 5 against 3/m = %d %+v, want 200, not allowed, remaining 0, retry within the minute", status, cr)
			}
			for _, body := range []string{`{"rule":"api","key":"r1"}`, `{"rule":"api","key":"r1","cost":0}`} {
				// The retry counts down from the report's by the time
				// passed since (bounded from the report's sending: a
				// loaded machine can take milliseconds between calls).
				status, c := check(t, f, body)
				passed := time.Since(sent).Milliseconds() + 1
				if status != 200 || c.Allowed || c.RetryAfterMS > cr.RetryAfterMS || c.RetryAfterMS < cr.RetryAfterMS-passed {
					t.Fatalf("check %s after the report = %d %+v, want refused until the window ends (%d ms, less at most the %d ms passed)", body, status, c, cr.RetryAfterMS, passed)
				}
			}
			// A shadow rule is charged and never denies.
			for range 2 {
				if status, c := report(`{"rule":"watch","key":"s","cost":4}`); status != 200 || !c.Allowed {
					t.Fatalf("report on a shadow rule = %d %+v, want allowed", status, c)
				}
			}
			// Bad input is refused as by /v1/check.
			if status, _ := report(`{"rule":"api","key":"r1","cost":-1}`); status != 400 {
				t.Fatalf("report of cost -1 = %d, want 400", status)
			}
			if resp, _ := do(t, "GET", f.srv.URL+"/v1/report", "", nil); resp.StatusCode != 405 {
				t.Fatalf("GET /v1/report = %d, want 405", resp.StatusCode)
			}
		})
	}
}

// memHandler is the decision handler over rules specs on a fresh memory
// store.
func memHandler(t *testing.T, file string, specs ...rules.Spec) *server.Handler {
	t.Helper()
	set, err := rules.Compile(file, specs)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set, Now: alignedNow()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(server.Options{Engine: func() *engine.Engine { return e }})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
