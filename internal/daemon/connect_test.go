package daemon

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAPIPlainConnect: a CONNECT over HTTP/1.1 whose target is a path
// (CONNECT /v1/forward-auth, which Go's server takes as it takes net/rpc's
// CONNECT /_goRPC_) is answered 405 on the decision API on every path,
// with the token too and before it is checked, as the proxy answers a
// CONNECT: forward auth took it for a request to decide on, spending a
// rule's quota, and answered 200, the answer that opens a tunnel.
func TestAPIPlainConnect(t *testing.T) {
	token := t.TempDir() + "/api-token"
	mustWrite(t, token, "tok\n")
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  token_file: `+token+`
rules:
  - name: all
    rate: 1000000/m
`)
	addr := td.d.Addrs().API
	for _, path := range []string{"/v1/forward-auth", "/v1/check", "/v1/report", "/json", "/healthz", "/"} {
		for _, auth := range []string{"Bearer tok", ""} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measure
			req := "CONNECT " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nX-Forwarded-Method: GET\r\nX-Forwarded-Uri: /chat\r\n"
			if auth != "" {
				req += "Authorization: " + auth + "\r\n"
			}
			decided := td.metric("sluice_decisions_total", "rule", "all")
			if _, err := io.WriteString(c, req+"\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
			if err != nil {
				t.Fatalf("CONNECT %s: %v", path, err)
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			c.Close()
			if resp.StatusCode != 405 || !strings.Contains(string(b), `"error":"method_not_allowed`) || resp.Header.Get("Allow") == "" {
				t.Errorf("CONNECT %s (token: %v): %d Allow %q %s, want 405 method_not_allowed with an Allow", path, auth != "", resp.StatusCode, resp.Header.Get("Allow"), b)
			}
			if got := td.metric("sluice_decisions_total", "rule", "all") - decided; got != 0 {
				t.Errorf("CONNECT %s (token: %v): %v decisions, want none", path, auth != "", got)
			}
		}
	}
}
