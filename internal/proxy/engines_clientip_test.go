package proxy_test

import (
	"net/http"
	"net/netip"
	"testing"
)

// X-Real-IP is the client address the proxy found (as X-Forwarded-For),
// whatever the client sent, spelled however; the headers by which CDNs
// and load balancers name the client (True-Client-IP and the like) pass
// from a trusted proxy, and are dropped from any other peer, so that an
// upstream that believes them cannot be lied to; on every engine and
// both paths.
func TestEngineClientIPHeaders(t *testing.T) {
	sent := http.Header{
		"X-Real-Ip":           {"198.51.100.1"},
		"X_real_ip":           {"198.51.100.2"},
		"True-Client-Ip":      {"198.51.100.3"},
		"X-Client-Ip":         {"198.51.100.4"},
		"Cf-Connecting-Ip":    {"198.51.100.5"},
		"Fastly-Client-Ip":    {"198.51.100.6"},
		"X-Cluster-Client-Ip": {"198.51.100.7"},
		"True_client_ip":      {"198.51.100.8"},
		"X-Forwarded-For":     {"203.0.113.9"},
	}
	passed := []string{"True-Client-Ip", "X-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Cluster-Client-Ip", "True_client_ip"}
	forEngine(t, false, func(t *testing.T, ec engineCase) {
		for _, trusted := range []bool{false, true} {
			rec := newRecorder(t, nil)
			var o engineOpts
			if trusted {
				o.proxy.ClientIP.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			}
			s := startOn(t, ec, rec.srv.URL, o)
			for _, pa := range paths {
				req := request(t, s, pa.method, "/x", pa.body)
				for k, vv := range sent {
					req.Header[k] = vv
				}
				if resp, body := s.do(t, req); resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("%s: %d %q, want 200 ok", pa.name, resp.StatusCode, body)
				}
				r, _ := rec.last(t)
				client := "127.0.0.1"
				if trusted {
					client = "203.0.113.9"
				}
				if v := r.Header["X-Real-Ip"]; len(v) != 1 || v[0] != client {
					t.Errorf("%s, trusted %v: upstream X-Real-Ip %q, want [%s]", pa.name, trusted, v, client)
				}
				if v, ok := r.Header["X_real_ip"]; ok {
					t.Errorf("%s, trusted %v: upstream got the client's X_real_ip %q", pa.name, trusted, v)
				}
				for _, k := range passed {
					v, ok := r.Header[k]
					if trusted && (len(v) != 1 || v[0] != sent[k][0]) {
						t.Errorf("%s, from a trusted proxy: upstream %s %q, want %q", pa.name, k, v, sent[k])
					}
					if !trusted && ok {
						t.Errorf("%s, from an untrusted peer: upstream got %s %q, want it dropped", pa.name, k, v)
					}
				}
			}
		}
	})
}
