package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// serveConns listens on a free loopback port until the test ends and runs
// handle on each connection it accepts, in a goroutine of its own, closing
// the connection after; it returns the address.
func serveConns(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// scriptedUpstream answers each request on its connections with answer(the
// request), written as it is: what a real server may send that
// net/http's would not let a handler write.
func scriptedUpstream(t *testing.T, answer func(r *http.Request) string) string {
	t.Helper()
	return "http://" + serveConns(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, r.Body)
			if _, err := io.WriteString(c, answer(r)); err != nil {
				return
			}
		}
	})
}

// HEAD, 204 and 304 answers carry no body on every engine, also when the
// upstream's head announces one (a HEAD's or a 304's Content-Length, a
// HEAD's chunked), and the connection serves the next request.
func TestEngineNoBodyAnswers(t *testing.T) {
	up := scriptedUpstream(t, func(r *http.Request) string {
		switch {
		case r.URL.Path == "/204":
			return "HTTP/1.1 204 No Content\r\nX-Kind: 204\r\n\r\n"
		case r.URL.Path == "/304":
			return "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 11\r\n\r\n"
		case r.Method == "HEAD" && r.URL.Path == "/chunked":
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		case r.Method == "HEAD":
			return "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n"
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"
	})
	cases := []struct {
		method, path string
		status       int
		length       int64 // the client's resp.ContentLength
	}{
		{"HEAD", "/x", 200, 11},
		{"GET", "/204", 204, 0},
		{"GET", "/304", 304, -1},
		{"HEAD", "/chunked", 200, -1},
		{"GET", "/x", 200, 11},
		{"POST", "/204", 204, 0},
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		s := startOn(t, ec, up, engineOpts{})
		check := func(t *testing.T, i int, resp *http.Response, body string) {
			t.Helper()
			c := cases[i]
			want := ""
			if c.method == "GET" && c.status == 200 {
				want = "hello world"
			}
			if resp.StatusCode != c.status || body != want || c.length >= 0 && resp.ContentLength != c.length {
				t.Errorf("%s %s: %d length %d body %q, want %d length %d body %q", c.method, c.path, resp.StatusCode, resp.ContentLength, body, c.status, c.length, want)
			}
		}
		t.Run("client", func(t *testing.T) {
			for i, c := range cases {
				var rd io.Reader
				if c.method == "POST" {
					rd = strings.NewReader("x")
				}
				req, _ := http.NewRequest(c.method, s.URL+c.path, rd)
				resp, body := s.do(t, req)
				s.wantProto(t, resp)
				check(t, i, resp, body)
			}
		})
		if ec.h2 {
			return
		}
		t.Run("one raw connection", func(t *testing.T) {
			conn := s.dial(t)
			br := bufio.NewReader(conn)
			for i, c := range cases {
				body := ""
				if c.method == "POST" {
					body = "x"
				}
				fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", c.method, c.path, len(body), body)
				resp, err := http.ReadResponse(br, &http.Request{Method: c.method})
				if err != nil {
					t.Fatalf("%s %s: %v", c.method, c.path, err)
				}
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("%s %s: body: %v", c.method, c.path, err)
				}
				check(t, i, resp, string(b))
			}
		})
	})
}

// Expect: 100-continue on every HTTP/1.1 engine: the client is asked for
// its body (100) only when the upstream asks for it, and an upstream that
// answers at once (401) is relayed without the body ever being sent.
func TestEngineExpectContinue(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		})
		refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized) // without reading the body
		}))
		t.Cleanup(refuse.Close)
		t.Run("upstream reads", func(t *testing.T) {
			s := startOn(t, ec, rec.srv.URL, engineOpts{})
			conn := s.dial(t)
			br := bufio.NewReader(conn)
			io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 100 {
				t.Fatalf("before the body: %v %v, want 100 Continue", resp, err)
			}
			io.WriteString(conn, "hello")
			// The upstream's own 100 may be relayed too (a client takes
			// any number of 1xx answers before the final one).
			for resp, err = http.ReadResponse(br, nil); err == nil && resp.StatusCode == 100; {
				resp, err = http.ReadResponse(br, nil)
			}
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("after the body: %v %v, want 200", resp, err)
			}
			if _, body := rec.last(t); body != "hello" {
				t.Errorf("upstream body %q, want hello", body)
			}
		})
		t.Run("upstream refuses", func(t *testing.T) {
			s := startOn(t, ec, refuse.URL, engineOpts{})
			conn := s.dial(t)
			br := bufio.NewReader(conn)
			io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 401 {
				t.Fatalf("answer: %v %v, want the upstream's 401 (no 100: the body is not wanted)", resp, err)
			}
		})
	})
}

// Hop-by-hop headers stop at the proxy both ways on every engine (those
// the Connection header names too); the client's forwarding headers are
// replaced by the proxy's own (X-Forwarded-For from the resolved client,
// X-Forwarded-Proto https on TLS), Host is the upstream's and the
// original goes in X-Forwarded-Host; a trusted peer's X-Forwarded-For
// names the client, and its valid X-Forwarded-Host passes (its invalid
// X-Forwarded-Proto does not).
func TestEngineForwardingHeaders(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, trusted := range []bool{false, true} {
			for _, pa := range paths {
				t.Run(fmt.Sprintf("%s/trusted %v", pa.name, trusted), func(t *testing.T) {
					rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
						h := w.Header()
						h.Set("Connection", "X-Resp-Hop")
						h.Set("X-Resp-Hop", "1")
						h.Set("Keep-Alive", "timeout=5")
						h.Set("X-Resp", "end-to-end")
						io.WriteString(w, "ok")
					})
					var o engineOpts
					if trusted {
						o.proxy.ClientIP.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
					}
					s := startOn(t, ec, rec.srv.URL, o)
					var rd io.Reader
					if pa.body != "" {
						rd = strings.NewReader(pa.body)
					}
					req, _ := http.NewRequest(pa.method, s.URL+"/h", rd)
					req.Host = "app.example"
					h := http.Header{
						"X-Forwarded-For":   {"203.0.113.9"},
						"X-Forwarded-Host":  {"evil.example"},
						"X-Forwarded-Proto": {"gopher"},
						"X_forwarded_for":   {"10.9.9.9"},
						"Forwarded":         {"for=10.9.9.9"},
						"Te":                {"trailers"},
						"X-End":             {"a", "b"},
					}
					if !ec.h2 { // connection-specific headers do not exist in HTTP/2
						h["Connection"] = []string{"keep-alive, X-Hop"}
						h["X-Hop"] = []string{"secret"}
						h["Keep-Alive"] = []string{"timeout=5"}
						h["Proxy-Authorization"] = []string{"Basic eDp5"}
					}
					for k, vv := range h {
						req.Header[k] = vv
					}
					resp, body := s.do(t, req)
					s.wantProto(t, resp)
					if resp.StatusCode != 200 || body != "ok" {
						t.Fatalf("%d %q, want 200 ok", resp.StatusCode, body)
					}
					r, got := rec.last(t)
					if got != pa.body {
						t.Errorf("upstream body %q, want %q", got, pa.body)
					}
					for _, k := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "X_forwarded_for"} {
						if v, ok := r.Header[k]; ok {
							t.Errorf("upstream got %s: %q, want it dropped", k, v)
						}
					}
					if c := r.Header.Get("Connection"); strings.Contains(strings.ToLower(c), "x-hop") {
						t.Errorf("upstream Connection %q names the client's hop header", c)
					}
					if v := r.Header.Values("X-End"); len(v) != 2 || v[0] != "a" || v[1] != "b" {
						t.Errorf("upstream X-End %q, want [a b]", v)
					}
					if v := r.Header.Get("Te"); v != "trailers" {
						t.Errorf("upstream Te %q, want trailers", v)
					}
					wantFor, wantProto := "127.0.0.1", "http"
					if trusted {
						wantFor = "203.0.113.9"
					}
					if ec.tls {
						wantProto = "https"
					}
					if v := r.Header.Values("X-Forwarded-For"); len(v) != 1 || v[0] != wantFor {
						t.Errorf("upstream X-Forwarded-For %q, want [%s]", v, wantFor)
					}
					if v := r.Header.Values("X-Forwarded-Proto"); len(v) != 1 || v[0] != wantProto {
						t.Errorf("upstream X-Forwarded-Proto %q, want [%s]", v, wantProto)
					}
					wantHost := "app.example"
					if trusted {
						wantHost = "evil.example" // a trusted proxy's X-Forwarded-Host is believed (engines_fwdproto_test.go)
					}
					if v := r.Header.Values("X-Forwarded-Host"); len(v) != 1 || v[0] != wantHost {
						t.Errorf("upstream X-Forwarded-Host %q, want [%s]", v, wantHost)
					}
					checkForwarded(t, r.Header, wantProto, wantHost) // Sluice's own, not the client's for=10.9.9.9
					if r.Host != strings.TrimPrefix(rec.srv.URL, "http://") {
						t.Errorf("upstream Host %q, want the upstream's", r.Host)
					}
					if _, ok := resp.Header["X-Resp-Hop"]; ok {
						t.Error("the client got the upstream's X-Resp-Hop, which its Connection header named")
					}
					if v := resp.Header.Get("Keep-Alive"); v != "" {
						t.Errorf("the client got the upstream's Keep-Alive %q", v)
					}
					if resp.Header.Get("X-Resp") != "end-to-end" || resp.Header.Get("X-RateLimit-Limit") != "1000" {
						t.Errorf("client headers %v, want X-Resp and the rule's X-RateLimit-Limit 1000", resp.Header)
					}
				})
			}
		}
	})
}
