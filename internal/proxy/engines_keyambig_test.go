package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// ambiguousCases are requests whose key part an upstream may read as
// another value than the first one sent (the one a rule would count): a
// header sent twice, or under a CGI alias (X_Api_Key: HTTP_X_API_KEY);
// a query parameter sent twice, or under a name apps decode or mangle to
// the key's (PHP reads api.key, api+key and api[key as api_key; Rails
// and PHP read api_key[] as an array of it; ASP.NET folds case); a
// cookie sent twice (Django reads the last). A client would send a fresh
// value where the rule counts and the victim's where the app reads.
var ambiguousCases = []struct {
	name, target string
	hdr          http.Header
	part         string
}{
	{"header twice", "/", http.Header{"X-Api-Key": {"random", "victim"}}, "header:X-Api-Key"},
	{"header alias alone", "/", http.Header{"X_api_key": {"victim"}}, "header:X-Api-Key"},
	{"header and alias", "/", http.Header{"X-Api-Key": {"random"}, "X_API_KEY": {"victim"}}, "header:X-Api-Key"},
	{"query twice", "/?api_key=random&api_key=victim", nil, "query:api_key"},
	{"query escaped name", "/?api_key=random&api%5Fkey=victim", nil, "query:api_key"},
	{"query array", "/?api_key=random&api_key[]=victim", nil, "query:api_key"},
	{"query array alone", "/?api_key[]=victim", nil, "query:api_key"},
	{"query dot (PHP)", "/?api.key=victim", nil, "query:api_key"},
	{"query plus (PHP)", "/?api+key=victim&api_key=random", nil, "query:api_key"},
	{"query space (PHP)", "/?api%20key=victim", nil, "query:api_key"},
	{"query bracket (PHP)", "/?api[key=victim", nil, "query:api_key"},
	{"query case (ASP.NET)", "/?API_KEY=victim&api_key=random", nil, "query:api_key"},
	{"query ';' (Rack 2)", "/?api_key=random&x=1;api_key=victim", nil, "query:api_key"},
	{"query ';' dropped pair", "/?api_key=a1;&api_key=victim", nil, "query:api_key"},
	{"cookie twice", "/", http.Header{"Cookie": {"sid=random; sid=victim"}}, "cookie:sid"},
	{"cookie twice, two lines", "/", http.Header{"Cookie": {"sid=random", "sid=victim"}}, "cookie:sid"},
	{"cookie escaped name (PHP)", "/", http.Header{"Cookie": {"sid=random; s%69d=victim"}}, "cookie:sid"},
}

var ambiguousSpecs = []rules.Spec{
	{Name: "by-header", Key: []string{"header:X-Api-Key"}, Rate: "1000/s"},
	{Name: "by-query", Key: []string{"query:api_key"}, Rate: "1000/s"},
	{Name: "by-cookie", Key: []string{"cookie:sid"}, Rate: "1000/s"},
}

// A request whose key part is ambiguous is refused with 400 and
// {"error":"ambiguous_key","rule":…,"part":…}, and never reaches the
// upstream; a request with one plain value of each passes.
func TestAmbiguousKeyRefused(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{specs: ambiguousSpecs})
		for _, tc := range ambiguousCases {
			req, _ := http.NewRequest("GET", s.URL+tc.target, nil)
			for k, vv := range tc.hdr {
				req.Header[k] = vv
			}
			resp, body := s.do(t, req)
			var got struct{ Error, Rule, Part string }
			json.Unmarshal([]byte(body), &got)
			if resp.StatusCode != http.StatusBadRequest || got.Error != "ambiguous_key" || got.Part != tc.part || got.Rule == "" {
				t.Errorf("%s: GET %s %v: %d %q, want 400 ambiguous_key naming part %s", tc.name, tc.target, tc.hdr, resp.StatusCode, body, tc.part)
			}
		}
		if n := rec.count(); n != 0 {
			t.Errorf("the upstream saw %d ambiguous requests, want none", n)
		}
		req, _ := http.NewRequest("GET", s.URL+"/?api_key=victim&x_y=1&api=1", nil)
		req.Header["X-Api-Key"] = []string{"victim"}
		req.Header["X_other"] = []string{"1"}
		req.Header["Cookie"] = []string{"sid=victim; sid2=x"}
		if resp, body := s.do(t, req); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("GET with one value of each key part: %d %q, want 200 ok", resp.StatusCode, body)
		}
	})
}

// As sent on the wire, in any case: both HTTP/1 engines (the h1 front and
// net/http) canonicalize header names before the rules read them, so
// x-api-key and X-API-KEY are one header sent twice.
func TestAmbiguousKeyRawHeaders(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{specs: ambiguousSpecs})
		for _, head := range []string{
			"x-api-key: random\r\nX-API-KEY: victim\r\n",
			"x-api-key: random\r\nx_api_key: victim\r\n",
			"X_API_KEY: victim\r\n",
		} {
			c := s.dial(t)
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"+head+"Connection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%q: %v", head, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"part":"header:X-Api-Key"`) {
				t.Errorf("GET / with %q: %d %q, want 400 ambiguous_key for header:X-Api-Key", head, resp.StatusCode, b)
			}
		}
		if n := rec.count(); n != 0 {
			t.Errorf("the upstream saw %d ambiguous requests, want none", n)
		}
	})
}
