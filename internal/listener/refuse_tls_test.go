package listener_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/tlsconf"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// safety bounds the waits of the tests here: a hang guard, not a measure.
const safety = time.Minute

// tlsCapped serves a handler answering 200 on a real TLS listener (h2
// and http/1.1 by ALPN) capped at one connection, with AnswerRefused,
// its TLS loaded by tlsconf from o's files (o.Cert and o.Key are filled
// in). The one place is held by a TCP connection that never starts its
// handshake, so every connection after it is refused.
func tlsCapped(t *testing.T, ca *tlstest.CA, o tlsconf.Options, set ...func(*listener.Listener)) (addr string, wl *listener.Listener, reg *prometheus.Registry) {
	t.Helper()
	pair := ca.Server(t)
	o.Cert, o.Key = pair.CertFile, pair.KeyFile
	cfg, err := tlsconf.Load(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return tlsCappedWith(t, cfg, set...)
}

// tlsCappedWith is tlsCapped serving cfg; a nil cfg serves plaintext.
// Each of set is called on the Listener before it serves.
func tlsCappedWith(t *testing.T, cfg *tls.Config, set ...func(*listener.Listener)) (addr string, wl *listener.Listener, reg *prometheus.Registry) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	srv, wl := listener.Server(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), listener.Options{
		Name: "api", MaxConnections: 1, ReadHeaderTimeout: safety, AnswerRefused: true, Metrics: metrics.New(reg),
		ErrorLog: log.New(io.Discard, "", 0), // the held connection's handshake error at the end
	})
	for _, f := range set {
		f(wl)
	}
	served := net.Listener(wl)
	if cfg != nil {
		served = wl.TLS(cfg)
	}
	go srv.Serve(served)
	t.Cleanup(func() { srv.Close() })
	addr = ln.Addr().String()
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	waitFor(t, "the held connection taken", func() bool { return wl.Open() == 1 })
	return addr, wl, reg
}

// waitFor waits until cond holds, failing the test after safety.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(safety); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, safety)
		}
	}
}

// overloadedOver sends method to addr over a new connection of the
// transport rt and checks the answer is 503 overloaded over proto.
func overloadedOver(t *testing.T, rt http.RoundTripper, method, addr string, protoMajor int) {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(`{"rule":"r","key":"k"}`)
	}
	req, _ := http.NewRequest(method, "https://"+addr+"/v1/check", body)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s over the cap: %v, want a 503", method, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || string(b) != `{"error":"overloaded"}`+"\n" ||
		resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%s over the cap: %d %q %v, want 503 {\"error\":\"overloaded\"} with Retry-After: 1", method, resp.StatusCode, b, resp.Header)
	}
	if resp.ProtoMajor != protoMajor {
		t.Errorf("%s over the cap: answered over %s, want HTTP/%d", method, resp.Proto, protoMajor)
	}
}

// TestMaxConnectionsAnsweredTLS: under TLS, a connection beyond the cap
// gets its handshake, then 503 {"error":"overloaded"}: over HTTP/1.1, or
// over HTTP/2 when ALPN chose it, GET and POST alike (a gateway takes a
// failed handshake, as a close, for Sluice down). Each is counted
// refused, and none holds a place after.
func TestMaxConnectionsAnsweredTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	addr, wl, reg := tlsCapped(t, ca, tlsconf.Options{})
	h1 := ca.ClientConfig()
	h1.NextProtos = []string{"http/1.1"}
	h2 := &http2.Transport{TLSClientConfig: ca.ClientConfig()}
	t.Cleanup(h2.CloseIdleConnections)
	n := 0
	for _, method := range []string{"GET", "POST"} {
		overloadedOver(t, &http.Transport{TLSClientConfig: h1, DisableKeepAlives: true}, method, addr, 1)
		// A refused HTTP/2 connection answers more than one request:
		// each over a new one here.
		overloadedOver(t, h2, method, addr, 2)
		h2.CloseIdleConnections()
		n += 2
	}
	if got := metricstest.Gather(t, reg)[`sluice_connections_refused_total{listener="api"}`]; got != float64(n) {
		t.Errorf("sluice_connections_refused_total = %v, want %d", got, n)
	}
	waitFor(t, "the refused connections done", func() bool { return listener.Refusing(wl) == 0 })
	if got := wl.Open(); got != 1 {
		t.Errorf("places held after the refusals: %d, want 1 (the held connection)", got)
	}
}

// TestMaxConnectionsAnsweredMutualTLS: with a client CA, the refused
// connection's handshake asks for a client certificate and checks it as
// a served one's does: a client with one the CA signed and of an allowed
// name gets the 503; one without a certificate, or of another name, has
// its handshake refused, and no answer.
func TestMaxConnectionsAnsweredMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	clients := tlstest.NewCA(t, "clients")
	addr, _, _ := tlsCapped(t, ca, tlsconf.Options{ClientCA: clients.File, ClientSANs: []string{"gw.example"}})
	good := clients.Client(t, "gw", []string{"gw.example"})
	overloadedOver(t, &http.Transport{TLSClientConfig: ca.ClientConfig(good.TLS), DisableKeepAlives: true}, "GET", addr, 1)
	other := clients.Client(t, "other", []string{"other.example"})
	for name, cfg := range map[string]*tls.Config{"no certificate": ca.ClientConfig(), "a name not allowed": ca.ClientConfig(other.TLS)} {
		cfg.NextProtos = []string{"http/1.1"}
		req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
		resp, err := (&http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}).RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s, over the cap: %d, want the handshake refused", name, resp.StatusCode)
		}
	}
}

// TestRefusedTLSHandshakeBounded: a refused connection whose client never
// finishes its handshake (sends nothing; sends part of a ClientHello), or
// chooses HTTP/2 and never sends a request, is closed once the time a
// refused connection is held has passed, and gives back its place among
// those being answered: a client after it is answered.
func TestRefusedTLSHandshakeBounded(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	addr, wl, _ := tlsCapped(t, ca, tlsconf.Options{})
	for _, sent := range []string{"", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, sent)
		c.SetReadDeadline(time.Now().Add(safety))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("a refused client that sent %q and no more: read %v, want the connection closed", sent, err)
		}
		c.Close()
		waitFor(t, "the stalled handshake's place given back", func() bool { return listener.Refusing(wl) == 0 })
	}
	cfg := ca.ClientConfig()
	cfg.NextProtos = []string{"h2"}
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("an HTTP/2 client over the cap: %v, want its handshake done", err)
	}
	defer tc.Close()
	io.WriteString(tc, http2.ClientPreface)
	http2.NewFramer(tc, nil).WriteSettings()
	tc.SetReadDeadline(time.Now().Add(safety))
	_, err = io.Copy(io.Discard, tc) // the server's SETTINGS, and no more
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Error("a refused HTTP/2 client that sent no request: still open, want the connection closed")
	}
	waitFor(t, "the idle HTTP/2 connection's place given back", func() bool { return listener.Refusing(wl) == 0 })
	h1 := ca.ClientConfig()
	h1.NextProtos = []string{"http/1.1"}
	overloadedOver(t, &http.Transport{TLSClientConfig: h1, DisableKeepAlives: true}, "GET", addr, 1)
}
