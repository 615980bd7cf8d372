package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// The headers an upstream answer's Connection header names are dropped
// on every engine and both upstream paths, also when it says close
// (Connection: close, X-Foo), which Go's HTTP/1 client deletes before the
// proxy sees it: of a simple answer, a chunked one, a HEAD's and a 1xx
// (103 Early Hints). The request's are dropped too (TestEngineForwarding-
// Headers), also beside close.
func TestEngineConnectionNamedAnswerHeaders(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		conn := "X-Foo, close"
		if r.URL.Query().Get("close") == "" {
			conn = "X-Foo"
		}
		head := "Connection: " + conn + "\r\nX-Foo: secret\r\nX-Bar: kept\r\n"
		body, chunked := "ok", "2\r\nok\r\n0\r\n\r\n"
		if r.Method == "HEAD" {
			body, chunked = "", ""
		}
		switch r.URL.Path {
		case "/chunked":
			return "HTTP/1.1 200 OK\r\n" + head + "Transfer-Encoding: chunked\r\n\r\n" + chunked
		case "/folded":
			return "HTTP/1.1 200 OK\r\nConnection: close,\r\n X-Foo\r\nX-Foo: secret\r\nX-Bar: kept\r\nContent-Length: 2\r\n\r\n" + body
		case "/hints":
			return "HTTP/1.1 103 Early Hints\r\nConnection: close, X-Hint\r\nX-Hint: secret\r\nKeep-Alive: timeout=5\r\nLink: </a.css>; rel=preload\r\n\r\n" +
				"HTTP/1.1 200 OK\r\n" + head + "Content-Length: 2\r\n\r\n" + body
		}
		return "HTTP/1.1 200 OK\r\n" + head + "Content-Length: 2\r\n\r\n" + body
	})
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range append(paths, struct{ name, method, body string }{"fast path (HEAD)", "HEAD", ""}) {
			for _, path := range []string{"/?close=1", "/", "/chunked?close=1", "/chunked", "/folded", "/hints?close=1"} {
				if ec.rp && strings.Contains(path, "close") || ec.rp && path == "/folded" {
					// Options.Transport's documented limit (pinned by
					// TestEngineCustomTransportHopHeaders): it, which these
					// engines set, deletes the Connection header that says
					// close before the proxy sees what it names (the
					// proxy's own, to an https:// upstream too, does not:
					// TestEngineHTTPSUpstreamConnectionNamed).
					continue
				}
				var hints []textproto.MIMEHeader
				req := request(t, s, pa.method, path, pa.body)
				req = req.WithContext(withGot1xx(req.Context(), func(code int, h textproto.MIMEHeader) {
					hints = append(hints, h)
				}))
				resp, body := s.do(t, req)
				want := "ok"
				if pa.method == "HEAD" {
					want = ""
				}
				if resp.StatusCode != 200 || body != want {
					t.Errorf("%s %s: %d %q, want 200 %q", pa.name, path, resp.StatusCode, body, want)
				}
				if v, ok := resp.Header["X-Foo"]; ok {
					t.Errorf("%s %s: the client got X-Foo %q, which the upstream's Connection header named", pa.name, path, v)
				}
				if v := resp.Header.Get("X-Bar"); v != "kept" {
					t.Errorf("%s %s: X-Bar %q, want kept", pa.name, path, v)
				}
				if path == "/hints?close=1" {
					if len(hints) != 1 {
						t.Fatalf("%s %s: %d 1xx answers, want the upstream's 103", pa.name, path, len(hints))
					}
					if hints[0].Get("Link") == "" || hints[0].Get("X-Hint") != "" || hints[0].Get("Keep-Alive") != "" || hints[0].Get("Connection") != "" {
						t.Errorf("%s %s: 103 headers %v, want its Link without its hop-by-hop headers", pa.name, path, hints[0])
					}
				}
			}
		}
	})
}

// A client's request that names a header in Connection beside close
// does not pass it upstream, on every HTTP/1.1 engine and both paths.
func TestEngineConnectionNamedRequestHeaders(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, nil)
		s := startOn(t, ec, rec.srv.URL, engineOpts{})
		for _, pa := range paths {
			c := s.dial(t)
			fmt.Fprintf(c, "%s /x HTTP/1.1\r\nHost: app.example\r\nConnection: close, X-Foo\r\nX-Foo: secret\r\nX-Bar: kept\r\nContent-Length: %d\r\n\r\n%s",
				pa.method, len(pa.body), pa.body)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s: %v %v, want 200", pa.name, resp, err)
			}
			r, _ := rec.last(t)
			if v, ok := r.Header["X-Foo"]; ok {
				t.Errorf("%s: the upstream got X-Foo %q, which the client's Connection header named", pa.name, v)
			}
			if v := r.Header.Get("X-Bar"); v != "kept" {
				t.Errorf("%s: the upstream got X-Bar %q, want kept", pa.name, v)
			}
		}
	})
}

// No 1xx answer (103 Early Hints, 100 Continue) reaches an HTTP/1.0
// client, which knows none (RFC 9110 §15.2): it gets the final answer
// alone, on every HTTP/1.x engine and both paths; an HTTP/1.1 client
// still gets them.
func TestEngineNoInterimToHTTP10(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	})
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range paths {
			for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
				c := s.dial(t)
				fmt.Fprintf(c, "%s /x %s\r\nHost: app.example\r\nContent-Length: %d\r\n\r\n%s", pa.method, proto, len(pa.body), pa.body)
				br := bufio.NewReader(c)
				var statuses []string
				for {
					tp := textproto.NewReader(br)
					line, err := tp.ReadLine()
					if err != nil {
						t.Fatalf("%s %s: %v after %q", pa.name, proto, err, statuses)
					}
					if _, err := tp.ReadMIMEHeader(); err != nil {
						t.Fatalf("%s %s: %v after %q", pa.name, proto, err, statuses)
					}
					statuses = append(statuses, line[strings.IndexByte(line, ' ')+1:])
					if !strings.HasPrefix(statuses[len(statuses)-1], "1") {
						break
					}
				}
				want := "[200 OK]"
				if proto == "HTTP/1.1" {
					want = "[100 Continue 103 Early Hints 200 OK]"
				}
				if got := fmt.Sprint(statuses); got != want {
					t.Errorf("%s %s: answers %s, want %s", pa.name, proto, got, want)
				}
				c.Close()
			}
		}
	})
}

// withGot1xx has f called with each 1xx answer to the request of ctx.
func withGot1xx(ctx context.Context, f func(code int, h textproto.MIMEHeader)) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error { f(code, h); return nil }})
}

// An upstream status below 100 (http.ReadResponse takes any three
// digits), which no ResponseWriter can write, answers 502 bad_gateway on
// every engine and both paths, as any answer that cannot be relayed: the
// handler does not panic, dropping the client's connection and logging
// a stack trace each time.
func TestEngineUpstreamStatusBelow100(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		return "HTTP/1.1 " + strings.TrimPrefix(r.URL.Path, "/") + " Odd\r\nContent-Length: 2\r\n\r\nok"
	})
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range paths {
			for _, code := range []string{"099", "000"} {
				resp, body := s.do(t, request(t, s, pa.method, "/"+code, pa.body))
				if resp.StatusCode != http.StatusBadGateway || body != "{\"error\":\"bad_gateway\"}\n" {
					t.Errorf("%s, upstream status %s: %d %q, want 502 bad_gateway", pa.name, code, resp.StatusCode, body)
				}
			}
		}
	})
}

// An HTTP/1.0 request's Upgrade is ignored (RFC 9110 §7.8): it goes
// upstream without it, and its client, which could not follow a 101,
// gets the upstream's plain answer; on every HTTP/1.x engine and both
// paths.
func TestEngineHTTP10UpgradeIgnored(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		if r.Header.Get("Upgrade") != "" {
			return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	})
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		for _, pa := range paths {
			c := s.dial(t)
			fmt.Fprintf(c, "%s /ws HTTP/1.0\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: %d\r\n\r\n%s",
				pa.method, len(pa.body), pa.body)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("%s: %v %v, want the upstream's 200 (no upgrade)", pa.name, resp, err)
			}
			c.Close()
		}
	})
}

// To an https:// upstream, through the proxy's own Transport, the headers
// an HTTP/1.1 answer's Connection names are dropped too, also beside
// close, on every engine and both paths; an upstream that picks HTTP/2
// is still spoken to over HTTP/2.
func TestEngineHTTPSUpstreamConnectionNamed(t *testing.T) {
	ca := tlstest.NewCA(t, "upstream")
	pair := ca.Server(t)
	h1 := "https://" + serveConns(t, func(c net.Conn) {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{pair.TLS}, NextProtos: []string{"http/1.1"}})
		br := bufio.NewReader(tc)
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, r.Body)
			if _, err := io.WriteString(tc, "HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\nX-Foo: secret\r\nX-Bar: kept\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	var protos sync.Map
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		io.WriteString(w, "ok")
	}))
	h2.TLS = &tls.Config{Certificates: []tls.Certificate{pair.TLS}}
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		if ec.rp {
			return // Options.Transport: its documented limit
		}
		o := engineOpts{proxy: proxy.Options{TLSClientConfig: ca.ClientConfig()}}
		s1 := startOn(t, ec, h1, o)
		s2 := startOn(t, ec, h2.URL, o)
		for _, pa := range paths {
			resp, body := s1.do(t, request(t, s1, pa.method, "/x", pa.body))
			if resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("%s: %d %q, want 200 ok", pa.name, resp.StatusCode, body)
			}
			if v, ok := resp.Header["X-Foo"]; ok || resp.Header.Get("X-Bar") != "kept" {
				t.Errorf("%s: X-Foo %q, X-Bar %q; want X-Foo dropped (the upstream's Connection named it), X-Bar kept", pa.name, v, resp.Header.Get("X-Bar"))
			}
			if resp, body := s2.do(t, request(t, s2, pa.method, "/x", pa.body)); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("%s, HTTP/2 upstream: %d %q, want 200 ok", pa.name, resp.StatusCode, body)
			}
		}
		if _, ok := protos.Load("HTTP/2.0"); !ok {
			t.Error("the HTTP/2 upstream was not spoken to over HTTP/2")
		}
		if _, ok := protos.Load("HTTP/1.1"); ok {
			t.Error("the HTTP/2 upstream was spoken to over HTTP/1.1")
		}
	})
}
