package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/hop"
)

// An upstream answer's trailer reaches the client without the fields a
// trailer may not carry or that are hop-by-hop, declared or not, also
// those the answer's Connection names and those spelled with '_'
// (Transfer_Encoding), as the answer's head goes without them: on the
// fast path (GET) and through ReverseProxy (a POST with a body), on every
// engine. Other fields pass, declared or not.
func TestEngineResponseTrailerForbiddenFields(t *testing.T) {
	// Go's http.ReadResponse refuses an answer that declares
	// Transfer-Encoding, Content-Length or Trailer in its Trailer: those
	// come undeclared.
	declared := []string{"Connection", "Host", "Keep-Alive", "Upgrade", "Te", "X-Named", "Proxy-Authenticate",
		"Transfer_Encoding", "Keep_Alive", "Content_Length"}
	undeclared := []string{"Transfer-Encoding", "Content-Length", "Trailer", "Proxy-Connection"}
	var fields strings.Builder
	for _, k := range append(append([]string{"X-Ok"}, declared...), undeclared...) {
		v := "v-" + strings.ToLower(k)
		switch k {
		case "Transfer-Encoding", "Transfer_Encoding":
			v = "chunked"
		case "Content-Length", "Content_Length":
			v = "5"
		}
		fields.WriteString(k + ": " + v + "\r\n")
	}
	fields.WriteString("X-Late-Ok: late\r\n")
	answer := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: X-Named\r\nTransfer-Encoding: chunked\r\n" +
		"Trailer: X-Ok, " + strings.Join(declared, ", ") + "\r\n\r\n2\r\nok\r\n0\r\n" + fields.String() + "\r\n"
	upAddr := serveConns(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	dropped := append(append([]string{}, declared...), undeclared...)
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, "http://"+upAddr, engineOpts{})
		for _, method := range []string{"GET", "POST"} {
			body, decl, trailer := trailerAnswer(t, s, method)
			if body != "ok" {
				t.Errorf("%s: body %q, want ok", method, body)
			}
			if v := trailer.Get("X-Ok"); v != "v-x-ok" {
				t.Errorf("%s: trailer %v: X-Ok %q, want v-x-ok", method, trailer, v)
			}
			if v := trailer.Get("X-Late-Ok"); v != "late" {
				t.Errorf("%s: trailer %v: X-Late-Ok %q, want late", method, trailer, v)
			}
			for k, v := range trailer {
				if foldedIn(k, dropped) {
					t.Errorf("%s: the client got trailer %s: %q, want it dropped", method, k, v)
				}
			}
			names := hop.NewNames(decl)
			for _, d := range dropped {
				if names.Has(d) {
					t.Errorf("%s: the answer declares %s in Trailer %q", method, d, decl)
				}
			}
		}
	})
}

// trailerAnswer sends a request with method (a POST with a body) to s and
// returns the answer's body, its Trailer declaration and its trailer:
// read from the wire over HTTP/1.1 (Go's client refuses a declaration of
// Transfer-Encoding), by the engine's client over HTTP/2, which declares
// its trailer in HEADERS and has no Trailer header of its own.
func trailerAnswer(t *testing.T, s *eserved, method string) (body string, decl []string, trailer http.Header) {
	t.Helper()
	if s.ec.h2 {
		req := request(t, s, method, "/t", map[string]string{"GET": "", "POST": "x"}[method])
		resp, body := s.do(t, req)
		s.wantProto(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: answer %d %q, want 200", method, resp.StatusCode, body)
		}
		for k, v := range resp.Trailer {
			if v == nil {
				decl = append(decl, k) // declared, never sent
			}
		}
		return body, decl, resp.Trailer
	}
	c := s.dial(t)
	raw := "GET /t HTTP/1.1\r\nHost: x\r\n\r\n"
	if method == "POST" {
		raw = "POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"
	}
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	tp := textproto.NewReader(br)
	status, err := tp.ReadLine()
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200 ") {
		t.Fatalf("%s: status line %q %v, want 200", method, status, err)
	}
	head, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("%s: head: %v", method, err)
	}
	if te := head.Get("Transfer-Encoding"); te != "chunked" {
		t.Fatalf("%s: head %v: want a chunked answer to carry its trailer", method, head)
	}
	b, err := io.ReadAll(httputil.NewChunkedReader(br))
	if err != nil {
		t.Fatalf("%s: chunked body: %v", method, err)
	}
	tr, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("%s: trailer: %v", method, err)
	}
	return string(b), head["Trailer"], http.Header(tr)
}
