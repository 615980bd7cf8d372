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

// ambiguousCases are requests whose key part an upstream may read under
// another name than the one a rule counts: a header under a CGI alias
// (X_Api_Key: HTTP_X_API_KEY); a query parameter under a name apps mangle
// to the key's (PHP reads api.key, api+key and api[key as api_key; Rails
// and PHP read api_key[] as an array of it; ASP.NET folds case), or in a
// pair with a ';'; a cookie under a name PHP decodes to it. A client
// would send a fresh value where the rule counts and the victim's where
// the app reads. (A part sent twice under its own name is counted under
// each value instead: repeatedCases.)
var ambiguousCases = []struct {
	name, target string
	hdr          http.Header
	part         string
}{
	{"header alias alone", "/", http.Header{"X_api_key": {"victim"}}, "header:X-Api-Key"},
	{"header and alias", "/", http.Header{"X-Api-Key": {"random"}, "X_API_KEY": {"victim"}}, "header:X-Api-Key"},
	{"query array", "/?api_key=random&api_key[]=victim", nil, "query:api_key"},
	{"query array alone", "/?api_key[]=victim", nil, "query:api_key"},
	{"query dot (PHP)", "/?api.key=victim", nil, "query:api_key"},
	{"query plus (PHP)", "/?api+key=victim&api_key=random", nil, "query:api_key"},
	{"query space (PHP)", "/?api%20key=victim", nil, "query:api_key"},
	{"query bracket (PHP)", "/?api[key=victim", nil, "query:api_key"},
	{"query case (ASP.NET)", "/?API_KEY=victim&api_key=random", nil, "query:api_key"},
	{"query ';' (Rack 2)", "/?api_key=random&x=1;api_key=victim", nil, "query:api_key"},
	{"query ';' dropped pair", "/?api_key=a1;&api_key=victim", nil, "query:api_key"},
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
// net/http) canonicalize header names before the rules read them, so an
// alias is one in any case (and x-api-key and X-API-KEY are one header
// sent twice: TestRepeatedKeyCountsEach).
func TestAmbiguousKeyRawHeaders(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{specs: ambiguousSpecs})
		for _, head := range []string{
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

// repeatedCases send a key part twice under its own name, a fresh value
// beside the victim's, which an upstream may read either of (apps take
// the first, the last, or both): a header, a query parameter (also under
// a percent-encoded name, which every app decodes), a cookie (browsers
// send one name twice, for different paths or domains).
var repeatedCases = []struct {
	name, target string
	hdr          http.Header
	raw          string // the head's key lines as sent on the wire; "": hdr
	rule         string
}{
	{"header twice", "/", http.Header{"X-Api-Key": {"random", "victim"}}, "", "by-header"},
	{"header twice, in two cases", "/", nil, "x-api-key: random\r\nX-API-KEY: victim\r\n", "by-header"},
	{"query twice", "/?api_key=random&api_key=victim", nil, "", "by-query"},
	{"query escaped name", "/?api_key=random&api%5Fkey=victim", nil, "", "by-query"},
	{"cookie twice", "/", http.Header{"Cookie": {"sid=random; sid=victim"}}, "", "by-cookie"},
	{"cookie twice, two lines", "/", http.Header{"Cookie": {"sid=random", "sid=victim"}}, "", "by-cookie"},
}

// A key part sent twice under its own name is counted under each value:
// once the victim's key is spent, a request carrying it beside a fresh
// value is refused 429 by the rule and never reaches the upstream; two
// fresh values pass, each charged.
func TestRepeatedKeyCountsEach(t *testing.T) {
	specs := []rules.Spec{
		{Name: "by-header", Key: []string{"header:X-Api-Key"}, Rate: "2/h"},
		{Name: "by-query", Key: []string{"query:api_key"}, Rate: "2/h"},
		{Name: "by-cookie", Key: []string{"cookie:sid"}, Rate: "2/h"},
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{specs: specs})
		for range 2 { // spend the victim's key under each rule
			req, _ := http.NewRequest("GET", s.URL+"/?api_key=victim", nil)
			req.Header["X-Api-Key"] = []string{"victim"}
			req.Header["Cookie"] = []string{"sid=victim"}
			if resp, body := s.do(t, req); resp.StatusCode != 200 {
				t.Fatalf("GET with the victim's keys: %d %q, want 200", resp.StatusCode, body)
			}
		}
		seen := rec.count()
		for _, tc := range repeatedCases {
			var status int
			var body string
			if tc.raw != "" {
				if ec.h2 {
					continue // no raw HTTP/1 head over HTTP/2
				}
				c := s.dial(t)
				io.WriteString(c, "GET "+tc.target+" HTTP/1.1\r\nHost: x\r\n"+tc.raw+"Connection: close\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				b, _ := io.ReadAll(resp.Body)
				status, body = resp.StatusCode, string(b)
			} else {
				req, _ := http.NewRequest("GET", s.URL+tc.target, nil)
				for k, vv := range tc.hdr {
					req.Header[k] = vv
				}
				resp, b := s.do(t, req)
				status, body = resp.StatusCode, b
			}
			var got struct{ Error, Rule string }
			json.Unmarshal([]byte(body), &got)
			if status != http.StatusTooManyRequests || got.Error != "rate_limited" || got.Rule != tc.rule {
				t.Errorf("%s: %d %q, want 429 rate_limited by %s (counted under each value)", tc.name, status, body, tc.rule)
			}
		}
		if n := rec.count() - seen; n != 0 {
			t.Errorf("the upstream saw %d requests carrying a spent key, want none", n)
		}
		req, _ := http.NewRequest("GET", s.URL+"/", nil)
		req.Header["Cookie"] = []string{"sid=f1; sid=f2"}
		if resp, body := s.do(t, req); resp.StatusCode != 200 {
			t.Fatalf("two fresh cookie values: %d %q, want 200", resp.StatusCode, body)
		}
		req, _ = http.NewRequest("GET", s.URL+"/", nil)
		req.Header["Cookie"] = []string{"sid=f2"}
		if resp, body := s.do(t, req); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("f2 after f1 and f2: %d %q X-RateLimit-Remaining %q, want 200 and 0 left (charged once already)",
				resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
		}
	})
}
