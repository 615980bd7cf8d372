package proxy_test

import (
	"strconv"
	"strings"
	"testing"
)

// Servers that read request headers as CGI does (RFC 3875 §4.1.18: any
// case, '-' made '_', in HTTP_NAME) read Transfer_Encoding as
// Transfer-Encoding, and Puma frames a body by it: a Transfer_Encoding:
// chunked passed on beside the Content-Length the proxy sends has the
// upstream read the body by its chunks, and what follows the chunks'
// end as a request of its own, which no rule decided, on a connection
// other clients' requests share (request smuggling). So the hop-by-hop
// and framing headers spelled with '_' never reach the upstream, on
// either path, from any peer.
func TestEngineUnderscoredFramingHeadersDropped(t *testing.T) {
	smuggled := "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	hops := map[string]string{
		"Transfer_Encoding":   "chunked",
		"content_length":      "0",
		"Keep_Alive":          "timeout=5",
		"PROXY_CONNECTION":    "keep-alive",
		"Proxy_Authorization": "Basic eDp5",
		"Http2_Settings":      "AAMAAABkAAQAAP__",
		"X_custom":            "kept",
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, method := range []string{"GET", "POST"} {
			t.Run(method, func(t *testing.T) {
				up := newUpstreamHeads(t)
				s := startOn(t, ec, "http://"+up.addr, engineOpts{})
				var body string
				if method == "POST" {
					body = smuggled
				}
				req := request(t, s, method, "/a", body)
				for k, v := range hops {
					req.Header[k] = []string{v}
				}
				resp, got := s.do(t, req)
				s.wantProto(t, resp)
				if resp.StatusCode != 200 || got != "ok" {
					t.Fatalf("answer %d %q, want 200 ok", resp.StatusCode, got)
				}
				head, gotBody := up.last(t)
				cgi := map[string][]string{} // the upstream's headers as a CGI server reads them
				for k, vv := range head {
					n := "HTTP_" + strings.ToUpper(strings.ReplaceAll(k, "-", "_"))
					cgi[n] = append(cgi[n], vv...)
				}
				var bad []string
				for _, n := range []string{"HTTP_TRANSFER_ENCODING", "HTTP_KEEP_ALIVE", "HTTP_PROXY_CONNECTION", "HTTP_PROXY_AUTHORIZATION", "HTTP_HTTP2_SETTINGS"} {
					if v, ok := cgi[n]; ok {
						bad = append(bad, n+"="+strings.Join(v, ","))
					}
				}
				if len(bad) > 0 {
					t.Errorf("upstream head %v reads %s as a CGI server reads it, want none of them", head, bad)
				}
				want := []string(nil)
				if method == "POST" {
					want = []string{strconv.Itoa(len(body))}
				}
				if v := cgi["HTTP_CONTENT_LENGTH"]; strings.Join(v, ",") != strings.Join(want, ",") {
					t.Errorf("upstream head %v: HTTP_CONTENT_LENGTH reads %q, want %q, the body's own length alone", head, v, want)
				}
				if v := cgi["HTTP_X_CUSTOM"]; len(v) != 1 || v[0] != "kept" {
					t.Errorf("upstream head %v: HTTP_X_CUSTOM reads %q, want [kept]: only the framing names are dropped", head, v)
				}
				if gotBody != body {
					t.Errorf("upstream body %q, want %q", gotBody, body)
				}
			})
		}
	})
}
