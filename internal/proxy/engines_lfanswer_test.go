package proxy_test

import (
	"net/http"
	"testing"
)

// An upstream answer whose lines end in a bare LF (RFC 9112 §2.2 lets a
// recipient read one as a line's end; http.ReadResponse does) is relayed
// on every engine and both paths, the connection kept for the next
// request, as one ending in CRLF is. The fast path's reader of the common
// answer waited for a CRLFCRLF that never came, and answered 504 at
// response_header_timeout.
func TestEngineBareLFAnswer(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		if r.Method == "HEAD" {
			return "HTTP/1.1 200 OK\nContent-Length: 11\nX-Lf: yes\n\n"
		}
		return "HTTP/1.1 200 OK\nContent-Length: 11\nX-Lf: yes\n\nhello world"
	})
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range append(paths, struct{ name, method, body string }{"HEAD", "HEAD", ""}) {
			for range 2 { // the second on a connection the first gave back
				resp, body := s.do(t, request(t, s, pa.method, "/x", pa.body))
				s.wantProto(t, resp)
				want := "hello world"
				if pa.method == "HEAD" {
					want = ""
				}
				if resp.StatusCode != 200 || body != want || resp.Header.Get("X-Lf") != "yes" {
					t.Errorf("%s: %d %q X-Lf %q, want 200 %q yes", pa.name, resp.StatusCode, body, resp.Header.Get("X-Lf"), want)
				}
			}
		}
	})
}
