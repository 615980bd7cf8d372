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

	"github.com/sluicehq/sluice/internal/h2test"
	"github.com/sluicehq/sluice/internal/rules"
)

// An absolute-form target that is not an http URI with an authority
// (GET http:login) has no path: net/http takes it (an opaque URL), the
// rules match it as "/", and ReverseProxy sends it on as it came (GET
// login), which a server that reads a path without its leading '/' as if
// it had one serves as /login, past the rule limiting /login. Such a request is answered 400 on every engine, before any
// rule, and the upstream never sees it; a target with an authority
// passes with its path.
func TestEngineOpaqueTargetRefused(t *testing.T) {
	specs := []rules.Spec{{Name: "login", Match: rules.MatchSpec{Path: "/login"}, Rate: "100/m"}}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		up := newLineUpstream(t)
		s := startOn(t, ec, "http://"+up.addr, engineOpts{specs: specs})
		var h *h2test.Conn
		if ec.h2 {
			h = h2test.Dial(t, s.Addr, s.tlsCfg)
		}
		for i, target := range []string{"http:login", "http:%2Flogin", "https:login?x=1", "http:login/../login"} {
			var status, body string
			if ec.h2 {
				a := h.Request(t, uint32(2*i+1), true, ":method", "GET", ":scheme", "https", ":path", target, ":authority", "app.example")
				status, body = a.Status, a.Body
			} else {
				c := s.dial(t)
				io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: app.example\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("GET %s: %v", target, err)
				}
				b, _ := io.ReadAll(resp.Body)
				status, body = resp.Status[:3], string(b)
			}
			if status != "400" || !strings.Contains(body, `"error":"bad_request"`) {
				t.Errorf("GET %s: %s %q, want 400 bad_request", target, status, body)
			}
		}
		if got := up.lines(); len(got) != 0 {
			t.Errorf("the upstream got %q, want nothing", got)
		}
		// A target with an authority is taken, its path forwarded.
		req := request(t, s, "GET", "/login", "")
		req.URL.Opaque = "//app.example/login" // absolute-form on HTTP/1, :path on HTTP/2
		if ec.h2 {
			req.URL.Opaque = ""
		}
		resp, _ := s.do(t, req)
		if got := up.lines(); resp.StatusCode != 200 || len(got) != 1 || got[0] != "GET /login HTTP/1.1" {
			t.Errorf("GET /login: %d, the upstream got %q, want 200 and GET /login HTTP/1.1", resp.StatusCode, got)
		}
	})
}

// lineUpstream answers every request 200 and keeps its request line as it
// came on the wire (net/http's server would refuse some before a handler
// saw them).
type lineUpstream struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func newLineUpstream(t *testing.T) *lineUpstream {
	t.Helper()
	u := &lineUpstream{}
	u.addr = serveConns(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(safety))
		tp := textproto.NewReader(bufio.NewReader(c))
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		if _, err := tp.ReadMIMEHeader(); err != nil {
			return
		}
		u.mu.Lock()
		u.got = append(u.got, line)
		u.mu.Unlock()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	return u
}

func (u *lineUpstream) lines() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}
