package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/hop"
)

// A chunked request's trailer goes upstream without the fields a trailer
// must not carry (RFC 9110 §6.5.1: framing, routing, authentication,
// request modifiers; those Go's HTTP/2 server refuses in a trailer,
// httpguts.ValidTrailerHeader) and without the hop-by-hop ones, also
// those the request's Connection header names, as the head goes without
// them: a Host, Authorization or Connection sent after the body, which
// no rule saw, would reach an upstream that merges its trailer into its
// headers (Apache's MergeTrailers, Tomcat's allowedTrailerHeaders) as
// the request's own; so would an X-Original-URL or X-Rewrite-URL, by which
// some frameworks route (TestEngineRoutingHeadersDropped). Other fields
// pass, and the body.
func TestEngineRequestTrailerForbiddenFields(t *testing.T) {
	dropped := []string{"Host", "Authorization", "Connection", "Te", "Upgrade", "Keep-Alive", "Content-Type",
		"Cache-Control", "If-Match", "Proxy-Authorization", "X-Named", "X-Original-Url", "X-Rewrite-Url"}
	var decl, fields strings.Builder
	for _, k := range append(dropped, "X-Ok") {
		decl.WriteString(k + ", ")
		fields.WriteString(k + ": v-" + strings.ToLower(k) + "\r\n")
	}
	raw := "POST /a HTTP/1.1\r\nHost: x\r\nConnection: X-Named\r\nTrailer: " + strings.TrimSuffix(decl.String(), ", ") +
		"\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n" + fields.String() + "\r\n"
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		up := newTrailerUpstream(t)
		s := startOn(t, ec, "http://"+up.addr, engineOpts{})
		c := s.dial(t)
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer %v %v, want 200", resp, err)
		}
		head, body, trailer := up.last(t)
		if body != "abc" {
			t.Errorf("upstream body %q, want abc", body)
		}
		if v := trailer.Get("X-Ok"); v != "v-x-ok" {
			t.Errorf("upstream trailer %v: X-Ok %q, want v-x-ok", trailer, v)
		}
		declared := hop.NewNames(head["Trailer"])
		for _, k := range dropped {
			if v, ok := trailer[k]; ok {
				t.Errorf("upstream trailer %s: %q, want it dropped", k, v)
			}
			if declared.Has(k) {
				t.Errorf("upstream head declares %s in Trailer %q", k, head["Trailer"])
			}
		}
	})
}

// trailerUpstream answers each chunked request on a connection of its own
// and keeps its head, body and trailer as they came on the wire.
type trailerUpstream struct {
	addr string
	mu   sync.Mutex
	reqs []struct {
		head, trailer http.Header
		body          string
	}
}

func newTrailerUpstream(t *testing.T) *trailerUpstream {
	t.Helper()
	u := &trailerUpstream{}
	u.addr = serveConns(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(safety))
		tp := textproto.NewReader(bufio.NewReader(c))
		if _, err := tp.ReadLine(); err != nil {
			return
		}
		head, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		var body strings.Builder
		for { // chunks: size line, data; sizes in hex without extensions, as Go's Transport writes them
			line, err := tp.ReadLine()
			if err != nil {
				return
			}
			var n int
			for _, ch := range line {
				n = n*16 + strings.IndexRune("0123456789abcdef", ch)
			}
			if n == 0 {
				break
			}
			b := make([]byte, n+2)
			if _, err := io.ReadFull(tp.R, b); err != nil {
				return
			}
			body.Write(b[:n])
		}
		trailer, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, struct {
			head, trailer http.Header
			body          string
		}{http.Header(head), http.Header(trailer), body.String()})
		u.mu.Unlock()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	return u
}

func (u *trailerUpstream) last(t *testing.T) (head http.Header, body string, trailer http.Header) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("the upstream got no request")
	}
	r := u.reqs[len(u.reqs)-1]
	return r.head, r.body, r.trailer
}
