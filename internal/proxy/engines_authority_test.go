package proxy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/h2test"
)

// Go's HTTP/2 server takes any :authority (or, without one, any Host
// field) a client sends, where its HTTP/1 server and the h1 front answer
// 400 to a Host that is not one host[:port]: the proxy refuses such an
// HTTP/2 request with 400 too, before any rule and never forwarded, so
// that what a client can put in the upstream's X-Forwarded-Host (the
// Host it sent) is the same over either protocol: no space, quote, '<'
// or non-ASCII byte for an app that writes it into its pages.
func TestEngineHTTP2BadAuthority(t *testing.T) {
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		if !ec.h2 {
			t.Skip("HTTP/2 only")
		}
		up := newCountingUpstream(t)
		s := startOn(t, ec, up.srv.URL, engineOpts{})
		h := h2test.Dial(t, s.Addr, s.tlsCfg)
		id := uint32(1)
		for _, bad := range [][]string{
			{":authority", `app.example"><script>x</script>`},
			{":authority", "app example"},
			{":authority", "app.\xc3\xa9xample"},
			{":authority", `a\b`},
			{"host", "app example"}, // no :authority: Go reads the Host field
		} {
			fields := append([]string{":method", "GET", ":scheme", "https", ":path", "/x"}, bad...)
			a := h.Request(t, id, true, fields...)
			id += 2
			if a.Status != "400" || !strings.Contains(a.Body, `"error":"bad_request"`) {
				t.Errorf("%s %q: %+v, want 400 bad_request", bad[0], bad[1], a)
			}
		}
		if n := up.n.Load(); n != 0 {
			t.Errorf("the upstream saw %d request(s) (last %v), want none", n, up.last.Load())
		}
		// The connection goes on, and a host that is one passes.
		rec := newRecorder(t, nil)
		s = startOn(t, ec, rec.srv.URL, engineOpts{})
		h = h2test.Dial(t, s.Addr, s.tlsCfg)
		for i, host := range []string{"app.example:8443", "[2001:db8::1]:443", "a_b-c.example"} {
			a := h.Request(t, uint32(2*i+1), true, ":method", "GET", ":scheme", "https", ":path", "/x", ":authority", host)
			if a.Status != "200" {
				t.Fatalf(":authority %q: %+v, want 200", host, a)
			}
			r, _ := rec.last(t)
			if got := r.Header["X-Forwarded-Host"]; !slices.Equal(got, []string{host}) {
				t.Errorf(":authority %q: upstream X-Forwarded-Host %q", host, got)
			}
		}
	})
}
