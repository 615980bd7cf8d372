package proxy_test

import (
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// foldName is a header name as servers that read headers as CGI does
// read it: lower case, '_' for '-'.
func foldName(k string) string { return strings.ReplaceAll(strings.ToLower(k), "_", "-") }

// foldedIn reports whether k is one of names as foldName reads them.
func foldedIn(k string, names []string) bool {
	for _, n := range names {
		if foldName(k) == foldName(n) {
			return true
		}
	}
	return false
}

// A header a rule reads (a header: key part, the Cookie of a cookie: one)
// that a request sends only in its trailer never reaches the upstream:
// the rule did not see it (the request came without it, so the rule did
// not apply), and an upstream that merges its trailer into its headers
// (Apache's MergeTrailers, Tomcat's allowedTrailerHeaders) would act on
// an API key no limit counted. Spelled with '_' it goes too, as a CGI
// server would read it as the same header. Fields no rule reads pass, on
// every engine (HTTP/2 clients send trailers too).
func TestEngineRequestTrailerRuleFields(t *testing.T) {
	specs := []rules.Spec{
		{Name: "by-key", Rate: "1000/s", Key: []string{"header:X-Api-Key"}},
		{Name: "by-session", Rate: "1000/s", Key: []string{"cookie:sid"}},
		{Name: "by-ip", Rate: "1000/s"},
	}
	dropped := []string{"X-Api-Key", "X_Api_Key", "Cookie"}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		up := newTrailerUpstream(t)
		s := startOn(t, ec, "http://"+up.addr, engineOpts{specs: specs})
		req := request(t, s, "POST", "/upload", "")
		req.Body = io.NopCloser(strings.NewReader("abc"))
		req.ContentLength = -1
		req.Trailer = http.Header{"X-Ok": {"fine"}}
		for _, k := range dropped {
			req.Trailer[k] = []string{"v-" + k}
		}
		wantTrailerWithout(t, s, up, req, dropped)
	})
}

// wantTrailerWithout sends req, a POST of the body abc whose trailer has
// X-Ok: fine beside the fields dropped, and checks that up got the body
// and X-Ok, and neither a field of dropped (in any case, '_' for '-')
// nor its name in the head's Trailer.
func wantTrailerWithout(t *testing.T, s *eserved, up *trailerUpstream, req *http.Request, dropped []string) {
	t.Helper()
	resp, body := s.do(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("answer %d %q, want 200", resp.StatusCode, body)
	}
	head, gotBody, trailer := up.last(t)
	if gotBody != "abc" {
		t.Errorf("upstream body %q, want abc", gotBody)
	}
	if v := trailer.Get("X-Ok"); v != "fine" {
		t.Errorf("upstream trailer %v: X-Ok %q, want fine", trailer, v)
	}
	for k, v := range trailer {
		if foldedIn(k, dropped) {
			t.Errorf("upstream trailer has %s: %q, which no rule saw there: want it dropped", k, v)
		}
	}
	for _, v := range head["Trailer"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); foldedIn(f, dropped) {
				t.Errorf("upstream head declares %s in Trailer %q", f, head["Trailer"])
			}
		}
	}
}
