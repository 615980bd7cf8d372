package proxy_test

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/internal/rules"
)

// Extended CONNECT (RFC 8441: WebSockets over HTTP/2) is a CONNECT with
// :protocol and a :path. Go's HTTP/2 server takes one only under
// GODEBUG=http2xconnect=1 (read once, when the process starts); the
// proxy cannot tunnel it (the upstream speaks HTTP/1.1 Upgrade), and a
// rule for WebSocket upgrades (methods: [GET]) does not match its method.

// h2conn is a raw HTTP/2 connection to a TLS engine.
type h2conn struct {
	fr       *http2.Framer
	settings map[http2.SettingID]uint32 // the server's first SETTINGS
}

func dialH2(t *testing.T, s *eserved) *h2conn {
	t.Helper()
	cfg := s.tlsCfg.Clone()
	cfg.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", s.Addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(safety))
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	h := &h2conn{fr: fr, settings: map[http2.SettingID]uint32{}}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			sf.ForeachSetting(func(s http2.Setting) error { h.settings[s.ID] = s.Val; return nil })
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
}

// h2answer is what came back on a stream: a status and body, or a reset.
type h2answer struct {
	status string
	header http.Header
	body   string
	reset  http2.ErrCode
	isRST  bool
}

// request sends one request's HEADERS (pseudo-headers first, in order)
// on stream id, ending the stream if end, and reads the stream's answer.
func (h *h2conn) request(t *testing.T, id uint32, end bool, fields ...string) h2answer {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
		t.Fatal(err)
	}
	var a h2answer
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("stream %d: reading the answer: %v", id, err)
		}
		if f.Header().StreamID != id {
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("stream %d: GOAWAY %v", id, ga.ErrCode)
			}
			continue
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			a.isRST, a.reset = true, f.ErrCode
			return a
		case *http2.MetaHeadersFrame:
			a.status = f.PseudoValue("status")
			a.header = http.Header{}
			for _, hf := range f.RegularFields() {
				a.header.Add(hf.Name, hf.Value)
			}
			if f.StreamEnded() {
				return a
			}
		case *http2.DataFrame:
			a.body += string(f.Data())
			if f.StreamEnded() {
				return a
			}
		}
	}
}

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
		h := dialH2(t, s)
		if v, ok := h.settings[http2.SettingEnableConnectProtocol]; ok && v != 0 {
			t.Errorf("server SETTINGS %v: ENABLE_CONNECT_PROTOCOL advertised", h.settings)
		}
		a := h.request(t, 1, false, xconnectFields("app.example")...)
		if !a.isRST || a.reset != http2.ErrCodeProtocol {
			t.Errorf("extended CONNECT /chat: %+v, want RST_STREAM PROTOCOL_ERROR", a)
		}
		if n := s.active.Load(); n != 0 || up.n.Load() != 0 {
			t.Errorf("in the proxy %d, at the upstream %d, want neither", n, up.n.Load())
		}
		// The connection goes on.
		if a := h.request(t, 3, true, ":method", "GET", ":scheme", "https", ":path", "/x", ":authority", "app.example"); a.status != "200" {
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
		h := dialH2(t, s)
		if v := h.settings[http2.SettingEnableConnectProtocol]; v != 1 {
			t.Fatalf("server SETTINGS %v: ENABLE_CONNECT_PROTOCOL not advertised; the test does not test its case", h.settings)
		}
		a := h.request(t, 1, false, xconnectFields("app.example")...)
		t.Logf("extended CONNECT /chat: %+v; upstream saw %d request(s), last %v", a, up.n.Load(), up.last.Load())
		if a.status != "501" || !strings.Contains(a.body, `"error":"extended_connect_unsupported"`) {
			t.Errorf("extended CONNECT /chat: %+v, want 501 extended_connect_unsupported", a)
		}
		if n := up.n.Load(); n != 0 {
			t.Errorf("the upstream saw %d request(s) (last %v), want none", n, up.last.Load())
		}
		// The rule's one request a minute is still there for a GET.
		a = h.request(t, 3, true, ":method", "GET", ":scheme", "https", ":path", "/chat", ":authority", "app.example")
		if a.status != "200" || a.header.Get("x-ratelimit-remaining") != "0" {
			t.Errorf("GET /chat after the extended CONNECT: %+v, want 200 with X-RateLimit-Remaining: 0", a)
		}
	})
}
