package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rules"
)

// A POST's method-override headers (X-HTTP-Method-Override, X-HTTP-Method,
// X-Method-Override, in any case, also spelled with '_') sent in its
// trailer never reach the upstream, nor its trailer's declaration, on
// every engine (HTTP/2 clients send trailers too): the rules decided on
// the head, which came without them, so a DELETE rule never counted the
// POST, and an upstream that merges its trailer into its headers
// (Apache's MergeTrailers, Tomcat's allowedTrailerHeaders) and reads the
// override would serve it as a DELETE. They go whether a rule reads
// methods or not; other trailer fields pass.
func TestEngineRequestTrailerMethodOverride(t *testing.T) {
	dropped := []string{"X-Http-Method-Override", "X-HTTP-Method", "x-method-override", "X_Http_Method_Override"}
	for _, sc := range []struct {
		name  string
		specs []rules.Spec
	}{
		{"delete rule", []rules.Spec{{Name: "deletes", Match: rules.MatchSpec{Methods: []string{"DELETE"}}, Rate: "1000/s"}}},
		{"no method rule", nil},
	} {
		t.Run(sc.name, func(t *testing.T) {
			forEngine(t, false, func(t *testing.T, ec engineCase) {
				up := newTrailerUpstream(t)
				s := startOn(t, ec, "http://"+up.addr, engineOpts{specs: sc.specs})
				req := request(t, s, "POST", "/items/1", "")
				req.Body = io.NopCloser(strings.NewReader("abc"))
				req.ContentLength = -1
				req.Trailer = http.Header{"X-Ok": {"fine"}}
				for _, k := range dropped {
					req.Trailer[k] = []string{"DELETE"}
				}
				wantTrailerWithout(t, s, up, req, dropped)
			})
		})
	}
}
