package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
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
		// RFC 9112 §6.3 asks a server to close the connection after
		// such a request; net/http's server does not (and
		// TestSmuggling holds it so), but reads it by its chunks only,
		// so the upstream sees the requests as the proxy read them.
		{"Content-Length and chunked: chunked wins", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc", "", true},
		{"TE Chunked in capitals", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc", "", true},
		{"folded header unfolded", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", "", "a b", true},
		{"folded Transfer-Encoding", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "abc", "", true},
		{"lines ending in LF", "POST /a HTTP/1.1\nHost: x\nX-A: lf\nContent-Length: 3\n\nabc", "abc", "lf", true},
		{"same Content-Length twice", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "abc", "", true},
		{"Transfer-Encoding as a trailer", chunked + "3\r\nabc\r\n0\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n", "abc", "", true},
		{"HTTP/1.0 with chunked: no body, then closed", "POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "", "", false},
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
				if served := err == nil && more.StatusCode == 200; served != c.nextServed {
					t.Errorf("/next served: %v (%v %v), want %v", served, more, err, c.nextServed)
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
