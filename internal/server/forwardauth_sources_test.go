package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// The original request's URI, method and host each come from one source
// the gateway sets. Gateways pass the client's other headers on (nginx's
// auth_request does unless told otherwise, Traefik and Caddy always), so a
// client can add the other spelling, or the same header once more: a
// gateway that sets X-Original-URI then carried the client's
// X-Forwarded-Uri to Sluice, which preferred it, and the client chose the
// path (and method) its rules saw. Sources that disagree are refused with
// 400 naming them, and count nothing; sources that agree are one request.
func TestForwardAuthSourcesDisagree(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	ask := func(hdr [][2]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", f.srv.URL+"/v1/forward-auth", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		for _, h := range hdr {
			req.Header.Add(h[0], h[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, tc := range []struct {
		name string
		hdr  [][2]string
		want []string // in the error
	}{
		{"X-Original-URI set, the client's X-Forwarded-Uri", [][2]string{{"X-Original-Method", "POST"}, {"X-Original-URI", "/login"}, {"X-Forwarded-Uri", "/other"}},
			[]string{`X-Forwarded-Uri "/other"`, `X-Original-URI "/login"`}},
		{"X-Forwarded-Uri set, the client's X-Original-URI", [][2]string{{"X-Forwarded-Method", "POST"}, {"X-Forwarded-Uri", "/login"}, {"X-Original-URI", "/other"}},
			[]string{`X-Forwarded-Uri "/login"`, `X-Original-URI "/other"`}},
		{"X-Original-Method set, the client's X-Forwarded-Method", [][2]string{{"X-Original-Method", "POST"}, {"X-Original-URI", "/login"}, {"X-Forwarded-Method", "GET"}},
			[]string{`X-Forwarded-Method "GET"`, `X-Original-Method "POST"`}},
		{"X-Forwarded-Uri twice", [][2]string{{"X-Forwarded-Method", "POST"}, {"X-Forwarded-Uri", "/other"}, {"X-Forwarded-Uri", "/login"}},
			[]string{`X-Forwarded-Uri "/other"`, `X-Forwarded-Uri "/login"`}},
		{"X-Forwarded-Method twice", [][2]string{{"X-Forwarded-Method", "GET"}, {"X-Forwarded-Method", "POST"}, {"X-Forwarded-Uri", "/login"}},
			[]string{`X-Forwarded-Method "GET"`, `X-Forwarded-Method "POST"`}},
		{"X-Original-URI twice", [][2]string{{"X-Original-Method", "POST"}, {"X-Original-URI", "/other"}, {"X-Original-URI", "/login"}},
			[]string{`X-Original-URI "/other"`, `X-Original-URI "/login"`}},
		{"X-Forwarded-Host twice", [][2]string{{"X-Forwarded-Method", "POST"}, {"X-Forwarded-Uri", "/login"}, {"X-Forwarded-Host", "a.example"}, {"X-Forwarded-Host", "b.example"}},
			[]string{`X-Forwarded-Host "a.example"`, `X-Forwarded-Host "b.example"`}},
	} {
		resp, body := ask(tc.hdr)
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != 400 || e.Error == "" {
			t.Errorf("%s: %d %q, want 400 with an error", tc.name, resp.StatusCode, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(e.Error, w) {
				t.Errorf("%s: error %q, want it to name %s", tc.name, e.Error, w)
			}
		}
	}
	// Sources that agree (a fragment, which is no part of the request,
	// aside; a method in another case, read in upper case) are one
	// request: login-per-ip (2/m) counts them, and the refusals above
	// counted nothing.
	for i, hdr := range [][][2]string{
		{{"X-Forwarded-Method", "POST"}, {"X-Original-Method", "post"}, {"X-Forwarded-Uri", "/login"}, {"X-Original-URI", "/login#top"}, {"X-Forwarded-Host", "a.example"}, {"X-Forwarded-Host", "a.example"}},
		{{"X-Forwarded-Method", "POST"}, {"X-Forwarded-Method", "POST"}, {"X-Forwarded-Uri", "/login"}, {"X-Forwarded-Uri", "/login"}},
	} {
		resp, body := ask(hdr)
		if want := []string{"1", "0"}[i]; resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != want {
			t.Errorf("agreeing sources %v: %d %q, remaining %q; want 200 with %s left", hdr, resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"), want)
		}
	}
}

// A limited forward-auth answer must be a refusal: gateways pass a 2xx
// (and nginx a 3xx as an error) on as "allowed", so a deny status outside
// 400–599 would let every limited request through. The config refuses
// one; so does the handler.
func TestForwardAuthDenyStatusIsARefusal(t *testing.T) {
	set, err := rules.Compile("t.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []int{200, 204, 302, 399, 600, -1} {
		if _, err := server.New(server.Options{Engine: func() *engine.Engine { return e }, DenyStatus: st}); err == nil {
			t.Errorf("server.New with DenyStatus %d: no error, want one (not a refusal)", st)
		}
	}
	for _, st := range []int{0, 400, 401, 403, 429, 503, 599} {
		if _, err := server.New(server.Options{Engine: func() *engine.Engine { return e }, DenyStatus: st}); err != nil {
			t.Errorf("server.New with DenyStatus %d: %v", st, err)
		}
	}
}
