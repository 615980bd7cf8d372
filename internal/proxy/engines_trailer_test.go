package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A request's trailers reach the upstream on every engine: a chunked
// upload that ends with a checksum (the S3 upload idiom) arrives with it,
// not with the trailer announced and empty. A trailer that would say who
// the client is (X-Forwarded-For) is dropped, as in the head.
func TestEngineRequestTrailers(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		got := make(chan string, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			xff := "-"
			if v, ok := r.Trailer["X-Forwarded-For"]; ok {
				xff = strings.Join(v, ",")
			}
			got <- string(b) + " " + r.Trailer.Get("X-Checksum") + " " + xff
		}))
		t.Cleanup(up.Close)
		s := startOn(t, ec, up.URL, engineOpts{})
		lengths := []int64{-1} // chunked, the only way to send trailers over HTTP/1.1
		if ec.h2 {
			lengths = append(lengths, 7) // HTTP/2 also sends them after a Content-Length body
		}
		for _, n := range lengths {
			req := request(t, s, "POST", "/upload", "")
			req.Body = io.NopCloser(strings.NewReader("payload"))
			req.ContentLength = n
			req.Trailer = http.Header{"X-Checksum": {"c0ffee"}, "X-Forwarded-For": {"203.0.113.9"}}
			resp, body := s.do(t, req)
			if resp.StatusCode != 200 {
				t.Fatalf("upload (length %d): %d %q", n, resp.StatusCode, body)
			}
			if g := <-got; g != "payload c0ffee -" {
				t.Errorf("length %d: the upstream got %q, want the body, its trailer and no X-Forwarded-For trailer: \"payload c0ffee -\"", n, g)
			}
		}
	})
}
