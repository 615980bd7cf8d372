package gatewaytest

import (
	"net/http"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// routeHeaderSpellings are the spellings of X-Original-URL and
// X-Rewrite-URL a client may send: some frameworks (older Symfony and Zend
// Framework releases, apps behind IIS URL Rewrite) route by them instead of
// by the request line, and a CGI or FastCGI server reads '_' as '-'.
var routeHeaderSpellings = []string{
	"X-Original-URL", "x-original-url", "X_Original_URL", "X-Original_URL", "X_Original-URL",
	"X-Rewrite-URL", "X-REWRITE-URL", "X_Rewrite_URL", "X-Rewrite_URL", "X_Rewrite-URL",
}

// isRouteHeader says whether name is X-Original-URL or X-Rewrite-URL, in
// any case, '_' read as '-'.
func isRouteHeader(name string) bool {
	n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	return n == "x-original-url" || n == "x-rewrite-url"
}

// A client's X-Original-URL and X-Rewrite-URL, in any spelling, do not
// reach the app through the gateway, which the rules counted as the
// request line's path: else a GET /public carrying X-Original-URL: /login
// would be served as /login, past /login's limit. So too when the gateway
// fails open with Sluice down.
func TestGatewayDropsRouteHeaders(t *testing.T) {
	var spoof strings.Builder
	for _, name := range routeHeaderSpellings {
		spoof.WriteString(name + ": /login\r\n")
	}
	forFailModes(t, func(t *testing.T, k kind, open bool) {
		a := startApp(t)
		s := startSluice(t, sluiceYAML(t, k.sluice, ""))
		g := k.start(t, s.addr, a.addr(), variant{failOpen: open})
		if open {
			s.stop(t)
		}
		addr := strings.TrimPrefix(g.url, "http://")
		r := sendRaw(t, "127.0.0.40", addr, "GET /public HTTP/1.1\r\nHost: "+addr+"\r\n"+spoof.String()+
			"X-Control: kept\r\nConnection: close\r\n\r\n")
		if r.status != http.StatusOK || r.body != "app\n" {
			t.Fatalf("GET /public with X-Original-URL: /login: got %v, want 200 from the app", r)
		}
		h := *a.header.Load()
		if h.Get("X-Control") != "kept" {
			t.Fatalf("the app got no X-Control: kept (%v): it does not see the client's headers", h)
		}
		for name, v := range h {
			if isRouteHeader(name) {
				t.Errorf("the app got %s: %q, want no X-Original-URL or X-Rewrite-URL in any spelling", name, v)
			}
		}
		if got := *a.target.Load(); got != "/public" {
			t.Errorf("the app got request target %q, want /public", got)
		}
	})
}

// Traefik's emulation plays only what reaches Sluice: this plays what
// dynamic.yml's router does to a client's X-Original-URL and X-Rewrite-URL
// on the way to the app. A headers middleware removes a request header it
// sets to "" (http.Header.Del, so in any case, '_' kept as it is).
// traefik_real_test.go checks it with a real Traefik.
func TestTraefikDropsRouteHeaders(t *testing.T) {
	var tc traefikConfig
	if err := yaml.Unmarshal([]byte(example(t, "traefik/dynamic.yml")), &tc); err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for _, name := range routeHeaderSpellings {
		h.Add(name, "/login") // keyed as Traefik's server keys it: canonically
	}
	for _, mw := range tc.HTTP.Routers["app"].Middlewares {
		m, ok := tc.HTTP.Middlewares[mw]
		if !ok {
			t.Fatalf("dynamic.yml: the app's router names middleware %q, which is not defined", mw)
		}
		for k, v := range m.Headers.CustomRequestHeaders {
			if v == "" {
				h.Del(k)
			}
		}
	}
	for name, v := range h {
		if isRouteHeader(name) {
			t.Errorf("dynamic.yml: the app gets %s: %q, want no X-Original-URL or X-Rewrite-URL in any spelling", name, v)
		}
	}
}
