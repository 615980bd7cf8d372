package proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A POST's answer is never cut because the client's connection server
// closed the request body: on HTTP/1, net/http's server reads what is
// left of a request body and closes it when the answer's head goes out,
// while the upstream transport, having sent all Content-Length bytes,
// reads the body once more to see its end (Go issue 40747); a read that
// comes after that close failed, the transport took it for the client's
// failure and closed the upstream connection, and the answer streaming
// through it stopped short (the client saw unexpected EOF). The race is
// narrow; many requests make it likely.
func TestEnginePostAnswerNotCut(t *testing.T) {
	const tries = 200
	chunk := bytes.Repeat([]byte("x"), 8<<10)
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			for range 8 {
				w.Write(chunk)
				w.(http.Flusher).Flush()
			}
		}))
		t.Cleanup(up.Close)
		s := startOn(t, ec, up.URL, engineOpts{})
		for i := range tries {
			req, _ := http.NewRequest("POST", s.URL+"/answer", strings.NewReader("payload"))
			resp, err := s.client.Do(req)
			if err != nil {
				t.Fatalf("POST %d: %v", i, err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != 8*int64(len(chunk)) {
				t.Fatalf("POST %d of %d: the answer stopped at %d of %d bytes: %v", i, tries, n, 8*len(chunk), err)
			}
		}
	})
}
