package proxy_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A CONNECT (a forward proxy's tunnel: CONNECT host:port) is not for a
// reverse proxy: on every HTTP/1.x engine it is answered 405 and never
// reaches the upstream, which would otherwise get a method it never
// expects, past every rule written for a path.
func TestEngineConnectRefused(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{})
		c := s.dial(t)
		io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(b), `"error":"method_not_allowed"`) {
			t.Errorf("CONNECT example.com:443: %d %q, want 405 method_not_allowed", resp.StatusCode, b)
		}
		if n := rec.count(); n != 0 {
			t.Errorf("the upstream saw %d CONNECTs, want none", n)
		}
	})
}
