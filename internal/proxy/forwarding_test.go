package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/memstore"
)

// The proxy forwards a GET or HEAD without a body on its own fast path and
// everything else through httputil.ReverseProxy (fast.go); each behaviour
// below is checked on both.
var paths = []struct{ name, method, body string }{
	{"fast path (GET)", "GET", ""},
	{"ReverseProxy path (POST with a body)", "POST", "payload"},
}

// safety bounds a wait for something that must happen; not a timing
// assertion.
const safety = 30 * time.Second

func send(t *testing.T, method, url, body string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, vv := range hdr {
		req.Header[k] = vv
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// recorder is an upstream keeping each request's head and body.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
	body []string
}

func newRecorder(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *recorder {
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Clone(context.Background()))
		rec.body = append(rec.body, string(b))
		rec.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) last(t *testing.T) (*http.Request, string) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	return rec.reqs[len(rec.reqs)-1], rec.body[len(rec.body)-1]
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

// proxyTo serves a proxy with one generous rule in front of upstreamURL.
func proxyTo(t *testing.T, upstreamURL string, o proxy.Options) *served {
	t.Helper()
	set, err := rules.Compile("test.yaml", []rules.Spec{{Name: "r", Rate: "1000/s"}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New(memstore.Options{}), Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	o.Upstream, _ = url.Parse(upstreamURL)
	o.Engine = func() *engine.Engine { return e }
	p, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, p, nil)
}

// Hop-by-hop headers (the fixed list and those the Connection header
// names) stop at the proxy both ways; the client's forwarding headers are
// replaced; end-to-end headers and the body pass.
func TestHopByHopHeaders(t *testing.T) {
	for _, pa := range paths {
		t.Run(pa.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				h := w.Header()
				h.Set("Connection", "X-Resp-Hop")
				h.Set("X-Resp-Hop", "1")
				h.Set("Keep-Alive", "timeout=5")
				h.Set("X-Resp", "end-to-end")
				io.WriteString(w, "ok")
			})
			p := proxyTo(t, rec.srv.URL, proxy.Options{})
			resp, body := send(t, pa.method, p.URL+"/h", pa.body, http.Header{
				"Connection":          {"keep-alive, X-Hop"},
				"X-Hop":               {"secret"},
				"Keep-Alive":          {"timeout=5"},
				"Proxy-Authorization": {"Basic eDp5"},
				"Te":                  {"trailers"},
				"Forwarded":           {"for=10.9.9.9"},
				"X-Forwarded-Port":    {"1"},
				"X-End":               {"a", "b"},
			})
			if resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("%d %q, want 200 ok", resp.StatusCode, body)
			}
			r, got := rec.last(t)
			if got != pa.body {
				t.Errorf("upstream body %q, want %q", got, pa.body)
			}
			for _, k := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "X-Forwarded-Port"} {
				if v, ok := r.Header[k]; ok {
					t.Errorf("upstream got %s: %q, want it dropped", k, v)
				}
			}
			checkForwarded(t, r.Header, "http", strings.TrimPrefix(p.URL, "http://")) // Sluice's own, not the client's for=10.9.9.9
			if c := r.Header.Get("Connection"); strings.Contains(strings.ToLower(c), "x-hop") {
				t.Errorf("upstream Connection %q names the client's hop header", c)
			}
			if v := r.Header.Values("X-End"); len(v) != 2 || v[0] != "a" || v[1] != "b" {
				t.Errorf("upstream X-End %q, want [a b]", v)
			}
			if v := r.Header.Get("Te"); v != "trailers" {
				t.Errorf("upstream Te %q, want trailers (the client asked for them)", v)
			}
			if v := r.Header.Get("X-Forwarded-For"); v != "127.0.0.1" {
				t.Errorf("upstream X-Forwarded-For %q, want 127.0.0.1", v)
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

// The upstream URL's path is the base the request paths join, the query
// passes as sent.
func TestUpstreamBasePath(t *testing.T) {
	for _, pa := range paths {
		t.Run(pa.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			p := proxyTo(t, rec.srv.URL+"/api", proxy.Options{})
			for _, c := range []struct{ in, want string }{
				{"/v1/x?q=1&r=a%20b", "/api/v1/x?q=1&r=a%20b"},
				{"/", "/api/"},
				{"/a%2Fb", "/api/a%2Fb"},
			} {
				send(t, pa.method, p.URL+c.in, pa.body, nil)
				if r, _ := rec.last(t); r.RequestURI != c.want {
					t.Errorf("%s reached the upstream as %q, want %q", c.in, r.RequestURI, c.want)
				}
			}
		})
	}
}

// Response headers over the limit answer 502, and the next request is
// served (the connection that carried them is not reused).
func TestResponseHeaderLimit(t *testing.T) {
	for _, pa := range paths {
		t.Run(pa.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/big" {
					w.Header().Set("X-Big", strings.Repeat("a", proxy.DefaultMaxResponseHeaderBytes+1))
				}
				io.WriteString(w, "ok")
			})
			p := proxyTo(t, rec.srv.URL, proxy.Options{})
			if resp, body := send(t, pa.method, p.URL+"/big", pa.body, nil); resp.StatusCode != 502 || body != "{\"error\":\"bad_gateway\"}\n" {
				t.Errorf("response headers over %d bytes: %d %q, want 502 bad_gateway", proxy.DefaultMaxResponseHeaderBytes, resp.StatusCode, body)
			}
			if resp, body := send(t, pa.method, p.URL+"/small", pa.body, nil); resp.StatusCode != 200 || body != "ok" {
				t.Errorf("next request: %d %q, want 200 ok", resp.StatusCode, body)
			}
		})
	}
}

// Request headers over net/http's 1 MB are refused with 431 before any
// decision; the upstream sees nothing.
func TestRequestHeaderLimit(t *testing.T) {
	rec := newRecorder(t, nil)
	p := proxyTo(t, rec.srv.URL, proxy.Options{})
	c := dialRaw(t, p.Addr)
	go fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", http.DefaultMaxHeaderBytes+4096))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("request headers over 1 MB: %v %v, want 431", resp, err)
	}
	if n := rec.count(); n != 0 {
		t.Errorf("upstream saw %d requests, want 0", n)
	}
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(safety))
	t.Cleanup(func() { c.Close() })
	return c
}

// Request smuggling: a request framed two ways is refused, or read one
// way (Transfer-Encoding wins over Content-Length, as RFC 9112 says) and
// its connection closed after the answer; the upstream sees requests
// framed as the proxy read them.
func TestSmuggling(t *testing.T) {
	refused := []struct{ name, raw string }{
		{"two Content-Lengths", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc"},
		{"Content-Length list", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 40\r\n\r\nabc"},
		{"Transfer-Encoding not chunked", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc"},
		{"two Transfer-Encodings", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n"},
		{"GET with two Content-Lengths", "GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n"},
		{"space before the colon", "GET /a HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nabcde"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			p := proxyTo(t, rec.srv.URL, proxy.Options{})
			conn := dialRaw(t, p.Addr)
			io.WriteString(conn, c.raw)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil || resp.StatusCode/100 != 4 && resp.StatusCode != 501 {
				t.Fatalf("%v %v, want 400 or 501", resp, err)
			}
			if n := rec.count(); n != 0 {
				t.Errorf("upstream saw %d requests, want 0", n)
			}
		})
	}
	for _, method := range []string{"POST", "GET"} {
		t.Run(method+" with Content-Length and chunked", func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) })
			p := proxyTo(t, rec.srv.URL, proxy.Options{})
			conn := dialRaw(t, p.Addr)
			// By Content-Length the body hides GET /b; as chunked (as it
			// must be read) /b is a request of its own. A hop before may
			// have read it either way, so (RFC 9112 §6.3) the connection
			// closes after /a's answer: /b is never read.
			io.WriteString(conn, method+" /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+
				"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer for /a: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(b) != "/a" || !resp.Close {
				t.Errorf("answer %d %q (closing: %v), want 200 \"/a\" closing the connection", resp.StatusCode, b, resp.Close)
			}
			if more, err := http.ReadResponse(br, nil); err == nil {
				t.Errorf("a second answer (%d) on the connection, want it closed after /a", more.StatusCode)
			}
			// (What the upstream gets on the wire: TestEngineSmugglingUpstreamHead.)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.reqs) != 1 || rec.reqs[0].URL.Path != "/a" || rec.body[0] != "abc" {
				t.Errorf("upstream saw %d requests (bodies %q), want /a with abc alone", len(rec.reqs), rec.body)
			}
		})
	}
}

// A GET with a body is forwarded with it (the fast path is for bodiless
// requests only).
func TestGetWithBody(t *testing.T) {
	rec := newRecorder(t, nil)
	p := proxyTo(t, rec.srv.URL, proxy.Options{})
	if resp, _ := send(t, "GET", p.URL+"/q", "search terms", nil); resp.StatusCode != 200 {
		t.Fatalf("GET with a body: %d", resp.StatusCode)
	}
	if _, body := rec.last(t); body != "search terms" {
		t.Errorf("upstream body %q, want the GET's body", body)
	}
}

// HEAD gets the upstream's headers (Content-Length included) and no body;
// the connection then serves the next request.
func TestHead(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "11")
		if r.Method != "HEAD" {
			io.WriteString(w, "hello world")
		}
	})
	p := proxyTo(t, rec.srv.URL, proxy.Options{})
	conn := dialRaw(t, p.Addr)
	io.WriteString(conn, "HEAD /x HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	head, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
	if err != nil || head.StatusCode != 200 || head.ContentLength != 11 {
		t.Fatalf("HEAD: %v %v, want 200 with Content-Length 11", head, err)
	}
	get, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET after HEAD: %v", err)
	}
	if b, _ := io.ReadAll(get.Body); string(b) != "hello world" {
		t.Errorf("GET after HEAD: %q, want hello world (HEAD sent no body)", b)
	}
}

// An upstream that closes each connection after one answer, without
// saying Connection: close: a request that meets such a connection in the
// pool is sent again on a new one, so every client request is answered.
func TestStalePooledConnection(t *testing.T) {
	var conns, reqs atomic.Int64
	up := serveConns(t, func(c net.Conn) {
		conns.Add(1)
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		reqs.Add(1)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	p := proxyTo(t, "http://"+up, proxy.Options{})
	for i := range 5 {
		if resp, body := send(t, "GET", p.URL+"/", "", nil); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i, resp.StatusCode, body)
		}
	}
	if reqs.Load() != 5 || conns.Load() < 5 {
		t.Errorf("upstream read %d requests on %d connections, want 5 on 5", reqs.Load(), conns.Load())
	}
}

// A client that goes away in the middle of a streamed answer: the upstream
// request is abandoned (its connection closed), on both paths.
func TestClientGoneMidStream(t *testing.T) {
	for _, pa := range paths {
		t.Run(pa.name, func(t *testing.T) {
			gone := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				io.WriteString(w, "first\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				close(gone)
			}))
			t.Cleanup(up.Close)
			p := proxyTo(t, up.URL, proxy.Options{})
			conn := dialRaw(t, p.Addr)
			fmt.Fprintf(conn, "%s /s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", pa.method, len(pa.body), pa.body)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "first\n" {
				t.Fatalf("first line %q %v", line, err)
			}
			conn.Close()
			select {
			case <-gone:
			case <-time.After(safety):
				t.Fatal("the upstream request was not abandoned when the client went away")
			}
		})
	}
}

// Streaming on the ReverseProxy path too (TestStreaming is the fast path).
func TestStreamingPost(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	}))
	t.Cleanup(up.Close)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	p := proxyTo(t, up.URL, proxy.Options{})
	resp, err := http.Post(p.URL+"/events", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q %v, want it before the upstream finishes", line, err)
	}
	once.Do(func() { close(release) })
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Errorf("rest of the stream: %q", rest)
	}
}

// Timeouts and failures on both paths: an upstream silent past
// ResponseHeaderTimeout answers 504, one that is down 502, each with the
// rule's headers (the request was counted).
func TestUpstreamFailures(t *testing.T) {
	for _, pa := range paths {
		t.Run(pa.name, func(t *testing.T) {
			hung := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-hung:
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(up.Close)
			t.Cleanup(func() { close(hung) })
			p := proxyTo(t, up.URL, proxy.Options{ResponseHeaderTimeout: 50 * time.Millisecond})
			resp, body := send(t, pa.method, p.URL+"/", pa.body, nil)
			if resp.StatusCode != 504 || body != "{\"error\":\"gateway_timeout\"}\n" || resp.Header.Get("X-RateLimit-Remaining") != "999" {
				t.Errorf("upstream silent: %d %q remaining %q, want 504 gateway_timeout with 999 left", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
			}
			// Down: a port held refusing, not a closed server's,
			// which another listener (the proxy's own) could take.
			p = proxyTo(t, "http://"+refusedAddr(t), proxy.Options{})
			resp, body = send(t, pa.method, p.URL+"/", pa.body, nil)
			if resp.StatusCode != 502 || body != "{\"error\":\"bad_gateway\"}\n" || resp.Header.Get("X-RateLimit-Remaining") != "999" {
				t.Errorf("upstream down: %d %q remaining %q, want 502 bad_gateway with 999 left", resp.StatusCode, body, resp.Header.Get("X-RateLimit-Remaining"))
			}
		})
	}
}

// An HTTP/1.0 request without a Host reaches the upstream with the
// upstream's host, even with PreserveHost (there is none to preserve).
func TestHTTP10WithoutHost(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		rec := newRecorder(t, nil)
		p := proxyTo(t, rec.srv.URL, proxy.Options{PreserveHost: preserve})
		conn := dialRaw(t, p.Addr)
		io.WriteString(conn, "GET /old HTTP/1.0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("PreserveHost %v: %v %v, want 200", preserve, resp, err)
		}
		if r, _ := rec.last(t); r.Host != strings.TrimPrefix(rec.srv.URL, "http://") {
			t.Errorf("PreserveHost %v: upstream Host %q, want the upstream's", preserve, r.Host)
		}
	}
}
