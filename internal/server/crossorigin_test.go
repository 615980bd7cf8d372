package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/memstore"
)

// A web page can make its visitor's browser POST to the decision API
// (listen is 127.0.0.1:8080 by default, the machine the browser runs on):
// a text/plain or form body is a "simple" request, sent without a CORS
// preflight, so /v1/report with {"cost":1000000} put any key into debt.
// Browsers mark such requests (Sec-Fetch-Site, Origin); the API refuses
// them with 403, having counted nothing. Programs (curl, services) send
// neither header and are served; forward auth is not refused either, as
// the Origin and Sec-Fetch-Site it gets are the client's, passed on by
// the gateway.
func TestCrossOriginBrowserRequestsRefused(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	post := func(path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/v1/check", "/v1/report"} {
		for _, hdr := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
			{"Sec-Fetch-Site": "same-site"},
			{"Origin": "http://evil.example"}, // a browser without Sec-Fetch-Site
		} {
			code, body := post(path, `{"rule":"api","key":"victim","cost":3}`, hdr)
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal([]byte(body), &e); code != 403 || !strings.Contains(e.Error, "cross-origin") {
				t.Errorf("POST %s from a browser on another site (%v): %d %q, want 403 naming the cross-origin request", path, hdr, code, body)
			}
		}
	}
	// Nothing was counted; a program's request (no browser headers) is
	// served. (A same-origin one is refused: TestRebindingRefused.)
	if code, body := post("/v1/check", `{"rule":"api","key":"victim"}`, nil); code != 200 || !strings.Contains(body, `"remaining":2`) {
		t.Errorf("POST /v1/check from a program after the refusals: %d %q, want 200 with 2 of 3 left", code, body)
	}
	// Forward auth: the client's own browser headers, passed on.
	resp, body := forwardAuth(t, f, map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-For": "203.0.113.5",
		"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("forward-auth of a browser's cross-site POST: %d %q, remaining %q; want 200, counted (1 left)", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
	}
}

// POST /json, the Envoy service's HTTP form, refuses them too.
func TestCrossOriginJSONRefused(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	req, err := http.NewRequest("POST", e.http.URL+"/json", strings.NewReader(`{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), "cross-origin") {
		t.Errorf("POST /json from a browser on another site: %d %q, want 403", resp.StatusCode, b)
	}
	if e.remaining(t, "web", "user", "v") != 2 {
		t.Errorf("the refused /json request was counted")
	}
}

// TestRebindingRefused: a page whose host name its site rebinds to the
// API's address (DNS rebinding: evil.example resolves to 127.0.0.1 once
// the page is loaded) is same-origin with the API for the browser: Host
// and Origin both name evil.example, Sec-Fetch-Site is same-origin. The
// page could then spend any key and read the answers (/v1/rules,
// /v1/hotkeys), which a cross-site page cannot. The decision API serves no
// pages, so no page's request is its own: every request a browser marks
// as a page's is refused, GETs included, and on /metrics too (the hot
// keys are clients' keys); a URL typed in the address bar (Sec-Fetch-Site:
// none) and a program's request (a scraper's) are served.
func TestRebindingRefused(t *testing.T) {
	f := start(t, memstore.New(memstore.Options{}), "", nil)
	host := "evil.example:" + f.srv.URL[strings.LastIndexByte(f.srv.URL, ':')+1:]
	send := func(method, path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	page := map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/report", `{"rule":"api","key":"victim","cost":3}`},
		{"POST", "/v1/check", `{"rule":"api","key":"victim"}`},
		{"GET", "/v1/rules", ""},
		{"GET", "/metrics", ""}, // the hot keys: clients' keys
	} {
		for _, hdr := range []map[string]string{page, {"Origin": "http://" + host}, {"Sec-Fetch-Site": "same-origin"}} {
			if code, body := send(c.method, c.path, c.body, hdr); code != 403 || !strings.Contains(body, "cross-origin") {
				t.Errorf("%s %s from a page of the API's own host name %s (%v): %d %q, want 403", c.method, c.path, host, hdr, code, body)
			}
		}
	}
	for _, path := range []string{"/v1/rules", "/metrics"} {
		if code, body := send("GET", path, "", map[string]string{"Sec-Fetch-Site": "none"}); code != 200 {
			t.Errorf("GET %s typed in the address bar (Sec-Fetch-Site: none): %d %q, want 200", path, code, body)
		}
	}
	if code, body := send("POST", "/v1/check", `{"rule":"api","key":"victim"}`, nil); code != 200 || !strings.Contains(body, `"remaining":2`) {
		t.Errorf("POST /v1/check from a program after the refusals: %d %q, want 200 with 2 of 3 left (nothing counted)", code, body)
	}
}
