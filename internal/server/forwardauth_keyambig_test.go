package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// Forward auth cannot choose what reaches the app: the gateway passes the
// request on as it came. A key part sent twice under its own name (a
// header, a query parameter, also under a percent-encoded name, a cookie)
// is counted under each value, so once the victim's key is spent a
// request carrying it beside a fresh one is refused 429; a part the app
// may read under another name (the CGI alias X_Api_Key, a name apps
// mangle to it, a query pair with ';') is refused with 400 ambiguous_key,
// and counted in sluice_ambiguous_keys_total.
func TestForwardAuthAmbiguousKey(t *testing.T) {
	srv := forwardAuthServer(t,
		rules.Spec{Name: "by-header", Key: []string{"header:X-Api-Key"}, Rate: "1/m", Algorithm: "fixed_window"},
		rules.Spec{Name: "by-query", Key: []string{"query:api_key"}, Rate: "1/m", Algorithm: "fixed_window"},
		rules.Spec{Name: "by-cookie", Key: []string{"cookie:sid"}, Rate: "1/m", Algorithm: "fixed_window"},
	)
	ask := func(uri string, hdr http.Header) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/forward-auth", nil)
		for k, vv := range hdr {
			req.Header[k] = vv
		}
		req.Header["X-Forwarded-Uri"] = []string{uri}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	// The victim's key of each part, once: each rule's 1/m is spent.
	if resp, body := ask("/?api_key=victim", http.Header{"X-Api-Key": {"victim"}, "Cookie": {"sid=victim"}}); resp.StatusCode != 200 {
		t.Fatalf("first forward-auth: %d %q, want 200", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		name, uri string
		hdr       http.Header
		rule      string
		counted   bool // counted under each value: 429, the victim's spent
	}{
		{"header twice", "/", http.Header{"X-Api-Key": {"random", "victim"}}, "by-header", true},
		{"header alias", "/", http.Header{"X-Api-Key": {"random"}, "X_api_key": {"victim"}}, "by-header", false},
		{"header alias alone", "/", http.Header{"X_API_KEY": {"victim"}}, "by-header", false},
		{"query twice", "/?api_key=random&api_key=victim", nil, "by-query", true},
		{"query escaped name", "/?api_key=random&api%5fkey=victim", nil, "by-query", true},
		{"query array", "/?api_key[]=victim", nil, "by-query", false},
		{"query PHP name", "/?api_key=random&api.key=victim", nil, "by-query", false},
		// Rack 2 and Python before 3.9.2 split a query on ';' too, and read
		// the last or first value: Go's url.ParseQuery drops the pair.
		{"query after ';'", "/?api_key=random&x=1;api_key=victim", nil, "by-query", false},
		{"query before ';'", "/?api_key=victim;x=1&api_key=random", nil, "by-query", false},
		{"cookie twice", "/", http.Header{"Cookie": {"sid=random; sid=victim"}}, "by-cookie", true},
		{"cookie twice, two lines", "/", http.Header{"Cookie": {"sid=random", "sid=victim"}}, "by-cookie", true},
	} {
		resp, body := ask(tc.uri, tc.hdr)
		var got struct{ Error, Rule, Part string }
		json.Unmarshal([]byte(body), &got)
		if tc.counted {
			if resp.StatusCode != 429 || got.Error != "rate_limited" || got.Rule != tc.rule {
				t.Errorf("%s: forward-auth %s %v: %d %q, want 429 rate_limited by %s (counted under each value)", tc.name, tc.uri, tc.hdr, resp.StatusCode, body, tc.rule)
			}
			continue
		}
		if resp.StatusCode != 400 || got.Error != "ambiguous_key" || got.Rule != tc.rule || got.Part == "" {
			t.Errorf("%s: forward-auth %s %v: %d %q, want 400 ambiguous_key naming rule %s", tc.name, tc.uri, tc.hdr, resp.StatusCode, body, tc.rule)
		}
	}
	_, m := do(t, "GET", srv.URL+"/metrics", "", nil)
	for _, want := range []string{
		`sluice_ambiguous_keys_total{rule="by-header"} 2`,
		`sluice_ambiguous_keys_total{rule="by-query"} 4`,
		`sluice_decisions_total{result="denied",rule="by-cookie"} 2`, // one verdict per request, not per key
	} {
		if !strings.Contains(m, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	if strings.Contains(m, `sluice_ambiguous_keys_total{rule="by-cookie"}`) && !strings.Contains(m, `sluice_ambiguous_keys_total{rule="by-cookie"} 0`) {
		t.Error("a cookie sent twice counted as ambiguous")
	}
}

// forwardAuthServer serves the decision API (forward auth, /metrics) over
// real HTTP, deciding by specs on a memory store whose windows start at
// the test's start (alignedNow).
func forwardAuthServer(t *testing.T, specs ...rules.Spec) *httptest.Server {
	t.Helper()
	set, err := rules.Compile("test.yaml", specs)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set, Metrics: metrics.New(reg), Now: alignedNow()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(server.Options{Engine: func() *engine.Engine { return e }, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
