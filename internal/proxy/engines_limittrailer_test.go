package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/hop"
	"github.com/sluicehq/sluice/internal/rules"
)

// An upstream answer's trailer reaches the client without the rate-limit
// fields the proxy sets in the head of an answer a rule applied to
// (X-RateLimit-Limit, -Remaining, -Reset, RateLimit-Policy, RateLimit),
// declared or not, on both paths and every engine: the client would
// otherwise get the upstream's figures after the proxy's, and one that
// reads the trailer, or merges it into the head as some do, the
// upstream's. Retry-After, which the proxy sets only on its own 429,
// passes, as it does in the head; on an answer no rule applied to, which
// carries the upstream's figures in its head, so do they all.
func TestEngineResponseTrailerLimitFields(t *testing.T) {
	limit := map[string]string{"X-Ratelimit-Limit": "999", "X-Ratelimit-Remaining": "998", "X-Ratelimit-Reset": "7",
		"Ratelimit-Policy": `"up";q=999;w=60`, "Ratelimit": `"up";r=998;t=7`}
	var fields strings.Builder
	for k, v := range limit {
		fields.WriteString(k + ": " + v + "\r\n")
	}
	up := scriptedUpstream(t, func(*http.Request) string {
		return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n" +
			"Trailer: X-RateLimit-Remaining, RateLimit, Retry-After, X-Ok\r\n\r\n2\r\nok\r\n0\r\n" +
			fields.String() + "Retry-After: 120\r\nX-Ok: ok\r\n\r\n"
	})
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, applied := range []bool{true, false} {
			var o engineOpts
			if !applied {
				o.specs = []rules.Spec{{Name: "other", Match: rules.MatchSpec{Path: "/other"}, Rate: "1000/s"}}
			}
			s := startOn(t, ec, up, o)
			for _, method := range []string{"GET", "POST"} {
				body, decl, trailer := trailerAnswer(t, s, method)
				if body != "ok" || trailer.Get("X-Ok") != "ok" || trailer.Get("Retry-After") != "120" {
					t.Errorf("rule applied %v, %s: body %q, trailer %v; want ok, X-Ok and Retry-After passed", applied, method, body, trailer)
				}
				names := hop.NewNames(decl)
				for k, v := range limit {
					got, sent := trailer[k]
					switch {
					case applied && sent:
						t.Errorf("rule applied, %s: the client got trailer %s: %q beside the proxy's own in the head, want it dropped", method, k, got)
					case applied && names.Has(k):
						t.Errorf("rule applied, %s: the answer declares %s in Trailer %q", method, k, decl)
					case !applied && (len(got) != 1 || got[0] != v):
						t.Errorf("no rule applied, %s: trailer %s: %q, want the upstream's %q, as its head's would pass", method, k, got, v)
					}
				}
			}
		}
	})
}
