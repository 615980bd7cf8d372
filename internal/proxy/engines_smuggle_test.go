package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request smuggling on every HTTP/1.1 engine. Each case is sent followed
// at once by "GET /next": a request that is refused must close the
// connection unanswered past its refusal (so /next, which a smuggler
// would hide in a body, never reaches the upstream), and one that is
// taken must reach the upstream framed as the proxy read it.
func TestEngineSmuggling(t *testing.T) {
	const next = "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
	chunked := "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	refused := []struct {
		name, raw string
		status    int
	}{
		{"TE gzip, chunked", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
		{"TE chunked, gzip", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
		{"TE xchunked", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
		{"two Transfer-Encodings", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n", 501},
		{"Transfer-Encoding chunked twice", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
		{"TE chunked, chunked", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
		{"two Content-Lengths", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc", 400},
		{"Content-Length list", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 40\r\n\r\nabc", 400},
		{"Content-Length +3", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", 400},
		{"folded Content-Length", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n 0\r\n\r\nabc", 400},
		{"space before the colon", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc", 400},
		{"bare CR in a value", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400},
		{"two Hosts", "GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
		// Bodies that break while the request streams upstream: the
		// client gets 400 (its request was malformed, not the
		// upstream's answer), and the upstream never gets the
		// request whole (its read of the body fails), nor /next.
		{"chunk size zz", chunked + "zz\r\nabc\r\n0\r\n\r\n", 400},
		{"chunk size -1", chunked + "-1\r\nabc\r\n0\r\n\r\n", 400},
		{"chunk size 0x3", chunked + "0x3\r\nabc\r\n0\r\n\r\n", 400},
		{"chunk size over 64 bits", chunked + "fffffffffffffffff\r\nabc\r\n0\r\n\r\n", 400},
		{"huge chunk extension", chunked + "3;" + strings.Repeat("e", 100_000) + "\r\nabc\r\n0\r\n\r\n", 400},
		{"chunk lines ending in LF", chunked + "3\nabc\n0\n\n", 400},
		{"chunk longer than its size", chunked + "3\r\nabcd\r\n0\r\n\r\n", 400},
	}
	taken := []struct {
		name, raw  string
		body, xa   string // what the upstream must see of /a
		nextServed bool   // the connection goes on to /next
	}{
		// A chunked request is read by its chunks (a Content-Length
		// beside them is dropped, never forwarded) and its connection
		// closed after the answer: RFC 9112 §6.3 asks a server that
		// takes a request with both Content-Length and chunked to close
		// the connection after it, as another hop may have read it by
		// its Content-Length; net/http does not tell the handler whether
		// a Content-Length came, so every chunked request closes.
		{"Content-Length and chunked: chunked wins, then closed", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc", "", false},
		{"chunked and Content-Length, lines ending in LF", "POST /a HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\nContent-Length: 40\n\n3\r\nabc\r\n0\r\n\r\n", "abc", "", false},
		{"TE Chunked in capitals", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc", "", false},
		{"folded header unfolded", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", "", "a b", true},
		{"folded Transfer-Encoding", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc", "", false},
		{"lines ending in LF", "POST /a HTTP/1.1\nHost: x\nX-A: lf\nContent-Length: 3\n\nabc", "abc", "lf", true},
		{"same Content-Length twice", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "abc", "", true},
		{"Transfer-Encoding as a trailer", chunked + "3\r\nabc\r\n0\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n", "abc", "", false},
		// HTTP/1.0 has no chunked: its Transfer-Encoding is ignored,
		// and the connection closes after the answer even when the
		// client asked to keep it (RFC 9112 §6.1: the framing is faulty;
		// net/http does not tell the handler a Transfer-Encoding came,
		// so every HTTP/1.0 keep-alive closes).
		{"HTTP/1.0 with chunked: no body, then closed", "POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "", "", false},
		{"HTTP/1.0 keep-alive with chunked: no body, then closed", "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "", "", false},
		{"HTTP/1.0 keep-alive with Content-Length and chunked: by its length, then closed", "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", "abc", "", false},
		{"HTTP/1.0 keep-alive GET with chunked, then closed", "GET /a HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "", "", false},
	}
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		for _, c := range refused {
			t.Run(c.name, func(t *testing.T) {
				var mu sync.Mutex
				var seen []string
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, err := io.ReadAll(r.Body)
					mu.Lock()
					seen = append(seen, fmt.Sprintf("%s with body %q (%v)", r.URL.Path, b, err))
					if r.URL.Path == "/next" || err == nil && len(b) > 0 {
						t.Errorf("upstream got %s", seen[len(seen)-1])
					}
					mu.Unlock()
				}))
				t.Cleanup(up.Close)
				s := startOn(t, ec, up.URL, engineOpts{})
				conn := s.dial(t)
				io.WriteString(conn, c.raw+next)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer: %v", err)
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != c.status {
					t.Errorf("answer %d %q, want %d", resp.StatusCode, b, c.status)
				}
				if more, err := http.ReadResponse(br, nil); err == nil {
					t.Errorf("a second answer (%d) on the connection after the refusal, want it closed", more.StatusCode)
				}
			})
		}
		for _, c := range taken {
			t.Run(c.name, func(t *testing.T) {
				rec := newRecorder(t, nil)
				s := startOn(t, ec, rec.srv.URL, engineOpts{})
				conn := s.dial(t)
				io.WriteString(conn, c.raw+next)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("answer: %v %v, want 200", resp, err)
				}
				io.ReadAll(resp.Body)
				more, err := http.ReadResponse(br, nil)
				if c.nextServed && (err != nil || more.StatusCode != 200) {
					t.Errorf("/next: %v %v, want 200", more, err)
				} else if !c.nextServed && err == nil {
					t.Errorf("a second answer (%d) on the connection, want it closed after /a", more.StatusCode)
				}
				rec.mu.Lock()
				defer rec.mu.Unlock()
				want := 1
				if c.nextServed {
					want = 2
				}
				if len(rec.reqs) != want {
					t.Fatalf("upstream got %d requests, want %d", len(rec.reqs), want)
				}
				if r := rec.reqs[0]; r.URL.Path != "/a" || rec.body[0] != c.body || r.Header.Get("X-A") != c.xa {
					t.Errorf("upstream got %s body %q X-A %q, want /a body %q X-A %q", r.URL.Path, rec.body[0], r.Header.Get("X-A"), c.body, c.xa)
				}
				if tes := rec.reqs[0].Header.Values("Transfer-Encoding"); len(tes) > 0 {
					t.Errorf("upstream got Transfer-Encoding %q as a header", tes)
				}
			})
		}
	})
}

// What the upstream gets of a request framed two ways, on every HTTP/1.1
// engine, seen on the wire (a net/http upstream would hide it: it drops
// a Content-Length beside chunked itself): never both a Content-Length
// and a Transfer-Encoding (RFC 9112 §6.3: an intermediary MUST remove the
// Content-Length), nor the client's Transfer-Encoding on HTTP/1.0.
func TestEngineSmugglingUpstreamHead(t *testing.T) {
	cases := []struct{ name, raw, body string }{
		{"Content-Length and chunked", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc"},
		{"HTTP/1.0 Content-Length and chunked", "POST /a HTTP/1.0\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", "abc"},
	}
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				up := newUpstreamHeads(t)
				s := startOn(t, ec, "http://"+up.addr, engineOpts{})
				conn := s.dial(t)
				io.WriteString(conn, c.raw)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("answer: %v %v, want 200", resp, err)
				}
				head, body := up.last(t)
				cl, te := head.Get("Content-Length"), head.Get("Transfer-Encoding")
				if cl != "" && te != "" || cl == "40" || body != c.body {
					t.Errorf("upstream got Content-Length %q, Transfer-Encoding %q, body %q; want at most one of them, body %q", cl, te, body, c.body)
				}
			})
		}
	})
}

// upstreamHeads is an upstream that answers each request on a connection
// of its own and keeps its head as it came on the wire.
type upstreamHeads struct {
	addr string
	mu   sync.Mutex
	head []http.Header
	body []string
}

func newUpstreamHeads(t *testing.T) *upstreamHeads {
	t.Helper()
	u := &upstreamHeads{}
	u.addr = serveConns(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(safety))
		br := bufio.NewReader(c)
		tp := textproto.NewReader(br)
		if _, err := tp.ReadLine(); err != nil {
			return
		}
		h, err := tp.ReadMIMEHeader() // as it came: net/http's parse would drop a Content-Length beside chunked
		if err != nil {
			return
		}
		var body []byte
		if http.Header(h).Get("Transfer-Encoding") == "chunked" {
			body, err = io.ReadAll(httputil.NewChunkedReader(br))
		} else if n, perr := strconv.Atoi(http.Header(h).Get("Content-Length")); perr == nil {
			body = make([]byte, n)
			_, err = io.ReadFull(br, body)
		}
		u.mu.Lock()
		u.head = append(u.head, http.Header(h))
		u.body = append(u.body, string(body))
		u.mu.Unlock()
		if err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		}
	})
	return u
}

// last returns the head and body of the last request the upstream got.
func (u *upstreamHeads) last(t *testing.T) (http.Header, string) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.head) == 0 {
		t.Fatal("the upstream got no request")
	}
	return u.head[len(u.head)-1], u.body[len(u.body)-1]
}
