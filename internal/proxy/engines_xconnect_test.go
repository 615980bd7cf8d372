package proxy_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/h2test"
	"github.com/sluicehq/sluice/internal/rules"
)

// Extended CONNECT (RFC 8441: WebSockets over HTTP/2) is a CONNECT with
// :protocol and a :path. Go's HTTP/2 server takes one only under
// GODEBUG=http2xconnect=1 (read once, when the process starts); the
// proxy cannot tunnel it (the upstream speaks HTTP/1.1 Upgrade), and a
// rule for WebSocket upgrades (methods: [GET]) does not match its method.

// countingUpstream counts the requests that reach it and keeps the last
// one's method and path.
type countingUpstream struct {
	srv  *httptest.Server
	n    atomic.Int64
	last atomic.Value // string "METHOD path"
}

func newCountingUpstream(t *testing.T) *countingUpstream {
	u := &countingUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.n.Add(1)
		u.last.Store(r.Method + " " + r.RequestURI)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// chatRule limits WebSocket upgrades to /chat, which over HTTP/1.1 are
// GETs.
var chatRule = []rules.Spec{{Name: "chat", Match: rules.MatchSpec{Methods: []string{"GET"}, Path: "/chat"}, Rate: "1/m"}}

func xconnectFields(authority string) []string {
	return []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":path", "/chat",
		":authority", authority, "sec-websocket-version", "13", "origin", "https://" + authority}
}

// Without GODEBUG=http2xconnect=1 (the default), the HTTP/2 server does
// not advertise SETTINGS_ENABLE_CONNECT_PROTOCOL and resets an extended
// CONNECT with PROTOCOL_ERROR before the proxy sees it.
func TestEngineExtendedConnectOff(t *testing.T) {
	if strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1") {
		t.Skip("GODEBUG=http2xconnect=1 is set: TestEngineExtendedConnect covers it")
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		if !ec.h2 {
			t.Skip("HTTP/2 only")
		}
		up := newCountingUpstream(t)
		s := startOn(t, ec, up.srv.URL, engineOpts{specs: chatRule})
		h := h2test.Dial(t, s.Addr, s.tlsCfg)
		if v, ok := h.Settings[http2.SettingEnableConnectProtocol]; ok && v != 0 {
			t.Errorf("server SETTINGS %v: ENABLE_CONNECT_PROTOCOL advertised", h.Settings)
		}
		a := h.Request(t, 1, false, xconnectFields("app.example")...)
		if !a.RST || a.Reset != http2.ErrCodeProtocol {
			t.Errorf("extended CONNECT /chat: %+v, want RST_STREAM PROTOCOL_ERROR", a)
		}
		if n := s.active.Load(); n != 0 || up.n.Load() != 0 {
			t.Errorf("in the proxy %d, at the upstream %d, want neither", n, up.n.Load())
		}
		// The connection goes on.
		if a := h.Request(t, 3, true, ":method", "GET", ":scheme", "https", ":path", "/x", ":authority", "app.example"); a.Status != "200" {
			t.Errorf("GET after the reset: %+v, want 200", a)
		}
	})
}

// With GODEBUG=http2xconnect=1 the server advertises extended CONNECT
// and hands it to the proxy, which refuses it (501, JSON body) before
// matching rules: nothing reaches the upstream, no rule's quota is
// spent, and the connection goes on. The test runs itself again in a
// process with that GODEBUG, which the HTTP/2 server reads only at start.
func TestEngineExtendedConnect(t *testing.T) {
	if !strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1") {
		if testing.Short() {
			t.Skip("runs the test binary again")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestEngineExtendedConnect$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "GODEBUG=http2xconnect=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestEngineExtendedConnect/TLS_HTTP/2,_ReverseProxy_only")) {
			t.Fatalf("with GODEBUG=http2xconnect=1: %v\n%s", err, out)
		}
		return
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		if !ec.h2 {
			t.Skip("HTTP/2 only")
		}
		up := newCountingUpstream(t)
		s := startOn(t, ec, up.srv.URL, engineOpts{specs: chatRule})
		h := h2test.Dial(t, s.Addr, s.tlsCfg)
		if v := h.Settings[http2.SettingEnableConnectProtocol]; v != 1 {
			t.Fatalf("server SETTINGS %v: ENABLE_CONNECT_PROTOCOL not advertised; the test does not test its case", h.Settings)
		}
		a := h.Request(t, 1, false, xconnectFields("app.example")...)
		t.Logf("extended CONNECT /chat: %+v; upstream saw %d request(s), last %v", a, up.n.Load(), up.last.Load())
		if a.Status != "501" || !strings.Contains(a.Body, `"error":"extended_connect_unsupported"`) {
			t.Errorf("extended CONNECT /chat: %+v, want 501 extended_connect_unsupported", a)
		}
		if n := up.n.Load(); n != 0 {
			t.Errorf("the upstream saw %d request(s) (last %v), want none", n, up.last.Load())
		}
		// The rule's one request a minute is still there for a GET.
		a = h.Request(t, 3, true, ":method", "GET", ":scheme", "https", ":path", "/chat", ":authority", "app.example")
		if a.Status != "200" || a.Header.Get("x-ratelimit-remaining") != "0" {
			t.Errorf("GET /chat after the extended CONNECT: %+v, want 200 with X-RateLimit-Remaining: 0", a)
		}
	})
}
