package proxy_test

import (
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/internal/hop"
	"github.com/sluicehq/sluice/internal/rules"
)

// X-Original-URL and X-Rewrite-URL, by which some frameworks route a
// request instead of its request line (older Symfony and Zend Framework
// releases, apps behind IIS URL Rewrite), never reach the upstream from a
// client, in any spelling a CGI-style server reads as them, nor from a
// trusted proxy, on every engine and both paths: rules match the request
// line, so a GET /public carrying X-Original-URL: /login would be counted
// as /public and served as /login, past /login's limit. Here the upstream
// routes as such a framework does.
func TestEngineRoutingHeadersDropped(t *testing.T) {
	spellings := []string{"X-Original-Url", "X-Rewrite-Url", "X_original_url", "X_REWRITE_URL", "x-original-url"}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, trusted := range []bool{false, true} {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				path := r.URL.Path
				for k, vv := range r.Header {
					if hop.SameName(k, "X-Original-URL") || hop.SameName(k, "X-Rewrite-URL") {
						path = vv[0] // the framework's route
					}
				}
				io.WriteString(w, "served "+path)
			})
			var o engineOpts
			o.specs = []rules.Spec{{Name: "login", Match: rules.MatchSpec{Path: "/login"}, Rate: "1/m"}}
			if trusted {
				o.proxy.ClientIP.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			}
			s := startOn(t, ec, rec.srv.URL, o)
			if resp, body := s.do(t, request(t, s, "GET", "/login", "")); resp.StatusCode != 200 || body != "served /login" {
				t.Fatalf("trusted %v: GET /login: %d %q, want 200 (the rule's one a minute)", trusted, resp.StatusCode, body)
			}
			if resp, _ := s.do(t, request(t, s, "GET", "/login", "")); resp.StatusCode != 429 {
				t.Fatalf("trusted %v: GET /login again: %d, want 429", trusted, resp.StatusCode)
			}
			for _, pa := range paths {
				for _, k := range spellings {
					req := request(t, s, pa.method, "/public", pa.body)
					req.Header[k] = []string{"/login"}
					resp, body := s.do(t, req)
					s.wantProto(t, resp)
					if resp.StatusCode != 200 || body != "served /public" {
						t.Errorf("trusted %v: %s /public with %s: /login: %d %q, want 200 \"served /public\"", trusted, pa.name, k, resp.StatusCode, body)
					}
					r, _ := rec.last(t)
					for h, v := range r.Header {
						if hop.SameName(h, k) {
							t.Errorf("trusted %v: %s: the upstream got %s: %q, want it dropped", trusted, pa.name, h, v)
						}
					}
				}
			}
		}
	})
}
