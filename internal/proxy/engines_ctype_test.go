package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// An upstream answer without Content-Type reaches the client without one,
// on every engine, whatever its framing: the proxy must not invent a type
// by sniffing the body (an HTML page answered as text/plain would no
// longer render; the client is the one to sniff, or not). A type the
// upstream sent is kept as it is.
func TestEngineKeepsUntypedAnswers(t *testing.T) {
	const page = "<html><body>hello</body></html>"
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/typed":
				w.Header().Set("Content-Type", "application/x-custom")
			case "/hints":
				// An interim answer first, whose relay clears the
				// headers being built for the client.
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Del("Link")
				fallthrough
			default:
				w.Header()["Content-Type"] = nil // net/http would sniff one
			}
			if r.URL.Query().Get("len") == "1" {
				w.Header().Set("Content-Length", strconv.Itoa(len(page)))
			}
			w.Write([]byte(page))
		}))
		t.Cleanup(up.Close)
		s := startOn(t, ec, up.URL, engineOpts{})
		for _, method := range []string{"GET", "POST"} {
			for _, q := range []string{"?len=1", "?len=0"} {
				for _, path := range []string{"/untyped", "/hints"} {
					resp, body := s.do(t, request(t, s, method, path+q, ""))
					if resp.StatusCode != 200 || body != page {
						t.Fatalf("%s %s%s: %d %q", method, path, q, resp.StatusCode, body)
					}
					if ct, ok := resp.Header["Content-Type"]; ok {
						t.Errorf("%s %s%s: Content-Type %q, want none (the upstream sent none)", method, path, q, ct)
					}
				}
				resp, _ := s.do(t, request(t, s, method, "/typed"+q, ""))
				if ct := resp.Header.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/x-custom" {
					t.Errorf("%s /typed%s: Content-Type %q, want the upstream's [application/x-custom]", method, q, ct)
				}
			}
		}
	})
}
