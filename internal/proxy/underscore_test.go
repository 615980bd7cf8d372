package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/proxy"
)

// CGI and WSGI servers (RFC 3875 §4.1.18; Python's wsgiref, uWSGI, PHP)
// read a header as HTTP_NAME with '-' made '_', so X_Forwarded_For from
// the client joins the proxy's X-Forwarded-For in HTTP_X_FORWARDED_FOR (or
// replaces it). The client's own forwarding headers are dropped however
// they are spelled: the upstream gets one X-Forwarded-For, the proxy's.
func TestUnderscoreForwardingHeadersDropped(t *testing.T) {
	for _, pa := range paths {
		t.Run(pa.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			p := proxyTo(t, rec.srv.URL, proxy.Options{})
			resp, body := send(t, pa.method, p.URL+"/h", pa.body, http.Header{
				"X_forwarded_for":   {"6.6.6.6"},
				"X-Forwarded_proto": {"https"},
				"X_FORWARDED_HOST":  {"evil.example"},
				"X_custom":          {"kept"},
			})
			if resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("%d %q, want 200 ok", resp.StatusCode, body)
			}
			r, _ := rec.last(t)
			cgi := map[string][]string{} // the names as a CGI server reads them
			for k, vv := range r.Header {
				n := "HTTP_" + strings.ToUpper(strings.ReplaceAll(k, "-", "_"))
				cgi[n] = append(cgi[n], vv...)
			}
			for n, want := range map[string]string{"HTTP_X_FORWARDED_FOR": "127.0.0.1", "HTTP_X_FORWARDED_PROTO": "http", "HTTP_X_CUSTOM": "kept"} {
				if got := cgi[n]; len(got) != 1 || got[0] != want {
					t.Errorf("upstream headers %v: %s reads %q, want [%s]", r.Header, n, got, want)
				}
			}
			if got := cgi["HTTP_X_FORWARDED_HOST"]; len(got) != 1 || strings.Contains(got[0], "evil") {
				t.Errorf("upstream headers %v: HTTP_X_FORWARDED_HOST reads %q, want the incoming Host alone", r.Header, got)
			}
		})
	}
}
