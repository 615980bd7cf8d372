package proxy_test

import (
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// X-Forwarded-Proto, -Host and -Port pass upstream from a trusted proxy
// (client_ip.trusted_proxies) when it sent one valid value of each, so
// that an app behind a TLS-terminating balancer sees https; from any
// other peer, or when the value is missing, invalid, a list or sent
// twice, Sluice sets Proto and Host from its own listener and the
// request's Host, and sends no Port. On every engine and both paths.
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

// A deferred request is replayed with the X-Forwarded-Proto, -Host and
// -Port a forwarded one would carry: a trusted proxy's, else Sluice's own.
func TestDeferredForwardedProtoHost(t *testing.T) {
	srv := redistest.StartServer(t)
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		own := "http"
		if ec.tls {
			own = "https"
		}
		for _, trusted := range []bool{false, true} {
			var tp []netip.Prefix
			prefix := "fwd-untrusted"
			if trusted {
				tp, prefix = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "fwd-trusted"
			}
			s, replayed := startDeferring(t, ec, srv.Addr, prefix, tp, func(r *http.Request) bool { return r.Header.Get("Sluice-Deferred-Id") != "" })
			req := request(t, s, "POST", "/job", "second")
			req.Host = "api.example"
			req.Header.Set("X-Forwarded-Proto", "HTTPS")
			req.Header.Set("X-Forwarded-Host", "app.example")
			req.Header.Set("X-Forwarded-Port", "443")
			if resp, body := s.do(t, req); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("trusted %v: second request: %d %s, want 202 (deferred)", trusted, resp.StatusCode, body)
			}
			var h http.Header
			select {
			case h = <-replayed:
			case <-time.After(safety): // a hang detector
				t.Fatal("the deferred request was never replayed")
			}
			want := [3][]string{{own}, {"api.example"}, nil}
			if trusted {
				want = [3][]string{{"https"}, {"app.example"}, {"443"}}
			}
			got := [3][]string{h["X-Forwarded-Proto"], h["X-Forwarded-Host"], h["X-Forwarded-Port"]}
			for i := range got {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("trusted %v: replay X-Forwarded-Proto, -Host, -Port %q, want %q", trusted, got, want)
					break
				}
			}
		}
	})
}
