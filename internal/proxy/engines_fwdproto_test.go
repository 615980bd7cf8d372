package proxy_test

import (
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// X-Forwarded-Proto, -Host and -Port pass upstream from a trusted proxy
// (client_ip.trusted_proxies) when it sent one valid value of each, so
// that an app behind a TLS-terminating balancer sees https; from any
// other peer, or when the value is missing, invalid, a list or sent
// twice, Sluice sets Proto and Host from its own listener and the
// request's Host, and sends no Port. The proto= and host= of a trusted
// proxy's RFC 7239 Forwarded pass the same way, where it sent no
// X-Forwarded-Proto or -Host: one element on one line, each value valid
// (quoted or not), for= and by= nodes (an address, unknown, or
// obfuscated). Upstream, Forwarded says what X-Forwarded-For, -Host and
// -Proto say. On every engine and both paths.
func TestEngineForwardedProtoHost(t *testing.T) {
	type want struct{ proto, host, port string } // "": Sluice's own (proto, host), none (port)
	cases := []struct {
		name string
		sent http.Header
		want want // from a trusted proxy
	}{
		{"https", http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"app.example:8443"}, "X-Forwarded-Port": {"8443"}},
			want{"https", "app.example:8443", "8443"}},
		{"http, any case", http.Header{"X-Forwarded-Proto": {"HTTP"}, "X-Forwarded-Host": {"[2001:db8::1]:80"}, "X-Forwarded-Port": {"80"}},
			want{"http", "[2001:db8::1]:80", "80"}},
		{"invalid", http.Header{"X-Forwarded-Proto": {"ftp"}, "X-Forwarded-Host": {"a/b"}, "X-Forwarded-Port": {"99999"}},
			want{}},
		{"empty", http.Header{"X-Forwarded-Proto": {""}, "X-Forwarded-Host": {""}, "X-Forwarded-Port": {""}},
			want{}},
		{"lists", http.Header{"X-Forwarded-Proto": {"https, http"}, "X-Forwarded-Host": {"a.example,b.example"}, "X-Forwarded-Port": {"443, 80"}},
			want{}},
		{"sent twice", http.Header{"X-Forwarded-Proto": {"https", "https"}, "X-Forwarded-Host": {"a.example", "a.example"}, "X-Forwarded-Port": {"443", "443"}},
			want{}},
		{"underscore spelling", http.Header{"X_forwarded_proto": {"https"}, "X_forwarded_host": {"a.example"}, "X_forwarded_port": {"443"}},
			want{}},
		// RFC 7239 Forwarded: its proto= and host= as X-Forwarded-Proto
		// and -Host, from one element on one line.
		{"Forwarded", http.Header{"Forwarded": {"for=203.0.113.9;proto=https;host=app.example"}},
			want{"https", "app.example", ""}},
		{"Forwarded proto alone", http.Header{"Forwarded": {"proto=https"}},
			want{"https", "", ""}},
		{"Forwarded quoted, any case", http.Header{"Forwarded": {`For="[2001:db8::7]:4711" ; PROTO="HTTPS"; Host="[2001:db8::1]:8443";ext="x, y"`}},
			want{"https", "[2001:db8::1]:8443", ""}},
		{"Forwarded unknown and obfuscated nodes", http.Header{"Forwarded": {"for=unknown;by=_gw1;proto=https;host=app.example"}},
			want{"https", "app.example", ""}},
		{"Forwarded obfuscated port", http.Header{"Forwarded": {`for="_hidden:_p1";proto=https`}},
			want{"https", "", ""}},
		{"Forwarded empty elements around one", http.Header{"Forwarded": {" , proto=https ,"}},
			want{"https", "", ""}},
		{"Forwarded with X-Forwarded-Port", http.Header{"Forwarded": {"proto=https;host=app.example"}, "X-Forwarded-Port": {"443"}},
			want{"https", "app.example", "443"}},
		{"X-Forwarded-Proto before Forwarded", http.Header{"X-Forwarded-Proto": {"http"}, "Forwarded": {"proto=https;host=fwd.example"}},
			want{"http", "fwd.example", ""}},
		{"X-Forwarded-Host before Forwarded", http.Header{"X-Forwarded-Host": {"xfh.example"}, "Forwarded": {"proto=https;host=fwd.example"}},
			want{"https", "xfh.example", ""}},
		{"an invalid X-Forwarded-Proto is not replaced by Forwarded's", http.Header{"X-Forwarded-Proto": {"https, http"}, "Forwarded": {"proto=https"}},
			want{}},
		{"Forwarded list", http.Header{"Forwarded": {"proto=http;host=evil.example, proto=https;host=app.example"}},
			want{}},
		{"Forwarded sent twice", http.Header{"Forwarded": {"proto=https;host=app.example", "proto=https;host=app.example"}},
			want{}},
		{"Forwarded invalid proto", http.Header{"Forwarded": {"proto=ftp;host=app.example"}},
			want{}},
		{"Forwarded invalid host", http.Header{"Forwarded": {`proto=https;host="a/b"`}},
			want{}},
		{"Forwarded host list", http.Header{"Forwarded": {`proto=https;host="a.example,b.example"`}},
			want{}},
		{"Forwarded for not a node", http.Header{"Forwarded": {"for=client1;proto=https;host=app.example"}},
			want{}},
		{"Forwarded IPv6 not in brackets", http.Header{"Forwarded": {`for="2001:db8::7";proto=https`}},
			want{}},
		{"Forwarded parameter twice", http.Header{"Forwarded": {"proto=https;proto=https"}},
			want{}},
		{"Forwarded quote left open", http.Header{"Forwarded": {`proto=https;host="app.example`}},
			want{}},
		{"Forwarded host not quoted", http.Header{"Forwarded": {"proto=https;host=[2001:db8::1]:80"}},
			want{}},
		{"Forwarded empty", http.Header{"Forwarded": {""}},
			want{}},
		{"Forwarded without proto or host", http.Header{"Forwarded": {"for=203.0.113.9"}},
			want{}},
		// A proxy that sends X-Forwarded-For speaks X-Forwarded-*: a
		// Forwarded beside it is the client's, which nginx or an AWS ALB
		// pass on untouched, and is not believed (package clientip reads
		// its for= only without X-Forwarded-For, too).
		{"Forwarded beside X-Forwarded-For", http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Forwarded-Proto": {"https"},
			"Forwarded": {"for=198.51.100.1;proto=http;host=evil.example"}},
			want{"https", "", ""}},
		{"Forwarded proto beside X-Forwarded-For", http.Header{"X-Forwarded-For": {"203.0.113.9"}, "Forwarded": {"proto=https;host=evil.example"}},
			want{}},
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		own := "http"
		if ec.tls {
			own = "https"
		}
		for _, trusted := range []bool{false, true} {
			rec := newRecorder(t, nil)
			var o engineOpts
			if trusted {
				o.proxy.ClientIP.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			}
			s := startOn(t, ec, rec.srv.URL, o)
			for _, c := range cases {
				for _, pa := range paths {
					req := request(t, s, pa.method, "/x", pa.body)
					for k, vv := range c.sent {
						req.Header[k] = vv
					}
					if resp, body := s.do(t, req); resp.StatusCode != 200 || body != "ok" {
						t.Fatalf("%s, %s: %d %q, want 200 ok", c.name, pa.name, resp.StatusCode, body)
					}
					r, _ := rec.last(t)
					w := want{own, req.URL.Host, ""}
					if trusted {
						w = c.want
						if w.proto == "" {
							w.proto = own
						}
						if w.host == "" {
							w.host = req.URL.Host
						}
					}
					check := func(k, v string) {
						t.Helper()
						got := r.Header[k]
						if v == "" && got != nil || v != "" && !slices.Equal(got, []string{v}) {
							t.Errorf("%s, %s, trusted %v: upstream %s %q, want %q", c.name, pa.name, trusted, k, got, v)
						}
					}
					check("X-Forwarded-Proto", w.proto)
					check("X-Forwarded-Host", w.host)
					check("X-Forwarded-Port", w.port)
					checkForwarded(t, r.Header, w.proto, w.host)
					for k := range r.Header {
						if k[0] == 'X' && k[1] == '_' {
							t.Errorf("%s, %s, trusted %v: upstream got %s", c.name, pa.name, trusted, k)
						}
					}
				}
			}
		}
	})
}

// checkForwarded fails t unless h carries the one Forwarded element the
// proxy sends upstream: for= the client address of X-Forwarded-For
// (none without it), host= and proto= those of X-Forwarded-Host and
// -Proto, which are host and proto.
func checkForwarded(t *testing.T, h http.Header, proto, host string) {
	t.Helper()
	v := h["Forwarded"]
	if len(v) != 1 {
		t.Errorf("upstream Forwarded %q, want one line", v)
		return
	}
	es, err := clientip.ParseForwarded(v[0])
	if err != nil || len(es) != 1 {
		t.Errorf("upstream Forwarded %q: %d elements, %v; want one element", v[0], len(es), err)
		return
	}
	want := clientip.Element{Host: host, Proto: proto}
	if xff := h["X-Forwarded-For"]; len(xff) == 1 {
		want.For = xff[0]
		if a, err := netip.ParseAddr(xff[0]); err == nil && a.Is6() {
			want.For = "[" + xff[0] + "]"
		}
	}
	if es[0] != want {
		t.Errorf("upstream Forwarded %q, want %q (as X-Forwarded-For, -Host, -Proto say)", v[0], want.String())
	}
	// And by the RFC's grammar, as a strict upstream parses it.
	rfc, err := proxy.ParseForwardedRFC(v[0])
	wantRFC := map[string]string{"proto": want.Proto}
	for k, v := range map[string]string{"for": want.For, "host": want.Host} {
		if v != "" {
			wantRFC[k] = v
		}
	}
	if err != nil || len(rfc) != 1 || !maps.Equal(rfc[0], wantRFC) {
		t.Errorf("upstream Forwarded %q by RFC 7239's grammar: %v, %v; want %v", v[0], rfc, err, wantRFC)
	}
}

// The Forwarded the proxy sends upstream is valid RFC 7239 whatever Host
// a client sent (net/http takes any of host[:port]'s bytes, in any
// order): host= says the Host only when it is one a strict parser reads,
// a uri-host [":" port] of RFC 3986, and holds none of ',', ';' and '=',
// which no DNS name or address holds and which parsers that do not read
// quoted strings (splitting at ',' and ';') would take for the end of
// the element or pair; the X-Forwarded-Host beside it is the Host as it
// came. On every engine and both paths, from a client and, by
// X-Forwarded-Host, from a trusted proxy.
func TestEngineForwardedHostSpellings(t *testing.T) {
	cases := []struct {
		host  string
		inFwd bool // host= in Forwarded
	}{
		{"app.example", true},
		{"app.example:8443", true},
		{"APP.example:", true},
		{"[2001:db8::1]:8443", true},
		{"[::ffff:192.0.2.1]", true},
		{"a%41b", true},
		{"a_b~c!$&'()*+-.d", true},
		{"x,for=192.0.2.66", false},
		{"x;for=192.0.2.66", false},
		{"x=y", false},
		{"a%zz", false},
		{"a:b:c", false},
		{"a[b]", false},
		{"[2001:db8::1", false},
		{"[fe80::1%25eth0]", false}, // from a trusted proxy: Go's client drops a Host's zone
		{"[192.0.2.1]", false},
		{"app.example:80a", false},
	}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		own := "http"
		if ec.tls {
			own = "https"
		}
		for _, trusted := range []bool{false, true} {
			rec := newRecorder(t, nil)
			var o engineOpts
			if trusted {
				o.proxy.ClientIP.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			}
			s := startOn(t, ec, rec.srv.URL, o)
			for _, c := range cases {
				if !trusted && strings.Contains(c.host, "%25") {
					continue
				}
				for _, pa := range paths {
					req := request(t, s, pa.method, "/x", pa.body)
					if trusted {
						req.Header.Set("X-Forwarded-Host", c.host)
					} else {
						req.Host = c.host
					}
					if resp, body := s.do(t, req); resp.StatusCode != 200 || body != "ok" {
						t.Fatalf("%q, %s: %d %q, want 200 ok", c.host, pa.name, resp.StatusCode, body)
					}
					r, _ := rec.last(t)
					xfh, inFwd := c.host, c.inFwd
					if trusted && strings.Contains(c.host, ",") { // a list: Sluice's own
						xfh, inFwd = req.URL.Host, true
					}
					if got := r.Header["X-Forwarded-Host"]; !slices.Equal(got, []string{xfh}) {
						t.Errorf("%q, %s, trusted %v: upstream X-Forwarded-Host %q, want %q", c.host, pa.name, trusted, got, xfh)
					}
					host := ""
					if inFwd {
						host = xfh
					}
					checkForwarded(t, r.Header, own, host)
				}
			}
		}
	})
}

// A deferred request is replayed with the X-Forwarded-Proto, -Host and
// -Port a forwarded one would carry, and the matching Forwarded: a trusted
// proxy's (as X-Forwarded-* or Forwarded), else Sluice's own.
func TestDeferredForwardedProtoHost(t *testing.T) {
	srv := redistest.StartServer(t)
	sent := []struct {
		name      string
		h         http.Header
		port      []string // from a trusted proxy
		untrusted bool     // not believed even from a trusted proxy
	}{
		{"X-Forwarded", http.Header{"X-Forwarded-Proto": {"HTTPS"}, "X-Forwarded-Host": {"app.example"}, "X-Forwarded-Port": {"443"}},
			[]string{"443"}, false},
		{"Forwarded", http.Header{"Forwarded": {`for=127.0.0.1;proto=HTTPS;host="app.example"`}}, nil, false}, // for=: the first request's client
		{"Forwarded beside X-Forwarded-For", http.Header{"X-Forwarded-For": {"127.0.0.1"}, "Forwarded": {`proto=HTTPS;host="app.example"`}}, nil, true},
	}
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		own := "http"
		if ec.tls {
			own = "https"
		}
		for _, sn := range sent {
			for _, trusted := range []bool{false, true} {
				var tp []netip.Prefix
				prefix := "fwd-untrusted-" + sn.name
				if trusted {
					tp, prefix = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "fwd-trusted-"+sn.name
				}
				s, replayed := startDeferring(t, ec, srv.Addr, prefix, tp, func(r *http.Request) bool { return r.Header.Get("Sluice-Deferred-Id") != "" })
				req := request(t, s, "POST", "/job", "second")
				req.Host = "api.example"
				for k, vv := range sn.h {
					req.Header[k] = vv
				}
				if resp, body := s.do(t, req); resp.StatusCode != http.StatusAccepted {
					t.Fatalf("%s, trusted %v: second request: %d %s, want 202 (deferred)", sn.name, trusted, resp.StatusCode, body)
				}
				var h http.Header
				select {
				case h = <-replayed:
				case <-time.After(safety): // a hang detector
					t.Fatal("the deferred request was never replayed")
				}
				want := [4][]string{{own}, {"api.example"}, nil, {clientip.Element{For: "127.0.0.1", Host: "api.example", Proto: own}.String()}}
				if trusted && !sn.untrusted {
					want = [4][]string{{"https"}, {"app.example"}, sn.port, {clientip.Element{For: "127.0.0.1", Host: "app.example", Proto: "https"}.String()}}
				}
				got := [4][]string{h["X-Forwarded-Proto"], h["X-Forwarded-Host"], h["X-Forwarded-Port"], h["Forwarded"]}
				for i := range got {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("%s, trusted %v: replay X-Forwarded-Proto, -Host, -Port, Forwarded %q, want %q", sn.name, trusted, got, want)
						break
					}
				}
			}
		}
	})
}
