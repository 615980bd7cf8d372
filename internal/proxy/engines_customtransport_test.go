package proxy_test

import (
	"net/http"
	"net/textproto"
	"testing"
)

// TestEngineCustomTransportHopHeaders pins what a caller's
// Options.Transport (net/http's Transport here, to a real upstream
// listener) lets through of an answer's hop-by-hop headers, as
// Options.Transport's documentation and the README say: the fixed ones
// of RFC 9110 §7.6.1 (Keep-Alive, Proxy-Connection, TE, Upgrade,
// Transfer-Encoding) never pass, nor do the headers a Connection header
// names that the transport leaves in the answer; but a Connection header
// that says close is deleted by the transport (http.ReadResponse, which
// reads 1xx answers too) before the proxy sees it, so the other headers
// it names (X-Foo in Connection: close, X-Foo) pass, of a 103 Early
// Hints as of a final answer. The proxy's own
// transport drops them (TestEngineConnectionNamedAnswerHeaders). Should
// this test fail because X-Foo or X-Hint no longer passes, the limit is gone:
// update the Options.Transport documentation and the README with it.
func TestEngineCustomTransportHopHeaders(t *testing.T) {
	const fixed = "Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTe: trailers\r\nUpgrade: websocket\r\nX-Bar: kept\r\nX-Foo: secret\r\n"
	up := scriptedUpstream(t, func(r *http.Request) string {
		switch r.URL.Path {
		case "/close":
			return "HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\n" + fixed + "Content-Length: 2\r\n\r\nok"
		case "/hints":
			return "HTTP/1.1 103 Early Hints\r\nConnection: close, X-Hint\r\nX-Hint: secret\r\nLink: </a.css>; rel=preload\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nConnection: X-Foo\r\n" + fixed + "Content-Length: 2\r\n\r\nok"
		}
		return "HTTP/1.1 200 OK\r\nConnection: X-Foo\r\n" + fixed + "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
	})
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		if !ec.rp {
			t.Skip("the proxy's own transport: TestEngineConnectionNamedAnswerHeaders")
		}
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range paths {
			for _, path := range []string{"/named", "/close", "/hints"} {
				var hints []textproto.MIMEHeader
				req := request(t, s, pa.method, path, pa.body)
				req = req.WithContext(withGot1xx(req.Context(), func(code int, h textproto.MIMEHeader) {
					hints = append(hints, h)
				}))
				resp, body := s.do(t, req)
				if resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("%s %s: %d %q, want 200 ok", pa.name, path, resp.StatusCode, body)
				}
				for _, k := range []string{"Keep-Alive", "Proxy-Connection", "Te", "Upgrade"} {
					if v, ok := resp.Header[k]; ok {
						t.Errorf("%s %s: the client got %s %q, a hop-by-hop header", pa.name, path, k, v)
					}
				}
				if v := resp.Header.Get("X-Bar"); v != "kept" {
					t.Errorf("%s %s: X-Bar %q, want kept", pa.name, path, v)
				}
				_, foo := resp.Header["X-Foo"]
				switch {
				case path == "/close" && !foo:
					t.Errorf("%s %s: X-Foo dropped beside close: the documented limit of Options.Transport is gone (update its documentation and the README)", pa.name, path)
				case path != "/close" && foo:
					t.Errorf("%s %s: the client got X-Foo, which the answer's Connection header named", pa.name, path)
				}
				if path == "/hints" {
					if len(hints) != 1 {
						t.Fatalf("%s %s: %d 1xx answers, want the upstream's 103", pa.name, path, len(hints))
					}
					if hints[0].Get("Link") == "" || hints[0].Get("Connection") != "" {
						t.Errorf("%s %s: 103 headers %v, want its Link without Connection", pa.name, path, hints[0])
					}
					if hints[0].Get("X-Hint") == "" {
						t.Errorf("%s %s: 103 without X-Hint, which its Connection named beside close: the documented limit of Options.Transport is gone (update its documentation and the README)", pa.name, path)
					}
				}
			}
		}
	})
}
