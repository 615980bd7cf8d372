package clientip

import (
	"net/netip"
	"testing"
)

// A Unix-socket peer ("@", a socket path) has no address: its headers
// are believed only with TrustUnix, and without them, or from an
// untrusted one, ClientIP returns the zero Addr.
func TestUnixPeer(t *testing.T) {
	trusting := Resolver{Trusted: prefixes("10.0.0.0/8"), TrustUnix: true}
	for _, tc := range []struct {
		name    string
		r       Resolver
		remote  string
		headers []string
		want    string // "" for the zero Addr
		trusts  bool
	}{
		{"untrusted, no header", Resolver{Trusted: prefixes("10.0.0.0/8")}, "@", nil, "", false},
		{"untrusted, X-Forwarded-For ignored", Resolver{Trusted: prefixes("10.0.0.0/8")}, "@", []string{"X-Forwarded-For: 203.0.113.9"}, "", false},
		{"trusted, X-Forwarded-For", trusting, "@", []string{"X-Forwarded-For: 203.0.113.9"}, "203.0.113.9", true},
		{"trusted, a named peer", trusting, "/run/nginx.sock", []string{"X-Forwarded-For: 203.0.113.9"}, "203.0.113.9", true},
		{"trusted, trusted hops skipped", trusting, "@", []string{"X-Forwarded-For: 203.0.113.9, 10.0.0.7"}, "203.0.113.9", true},
		{"trusted, Forwarded", trusting, "@", []string{"Forwarded: for=198.51.100.4"}, "198.51.100.4", true},
		{"trusted, no header", trusting, "@", nil, "", true},
		{"trusted, unreadable hop", trusting, "@", []string{"X-Forwarded-For: unknown"}, "", true},
		{"trusted, TCP peer not listed", trusting, "192.0.2.1:1234", []string{"X-Forwarded-For: 203.0.113.9"}, "192.0.2.1", false},
		{"trusted, empty RemoteAddr", trusting, "", []string{"X-Forwarded-For: 203.0.113.9"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req(tc.remote, tc.headers...)
			got := tc.r.ClientIP(r)
			if tc.want == "" && got.IsValid() || tc.want != "" && got != netip.MustParseAddr(tc.want) {
				t.Errorf("ClientIP = %v, want %q", got, tc.want)
			}
			if tr := tc.r.Trusts(r); tr != tc.trusts {
				t.Errorf("Trusts = %v, want %v", tr, tc.trusts)
			}
			if u := IsUnixPeer(tc.remote); u != (tc.remote == "@" || tc.remote == "/run/nginx.sock") {
				t.Errorf("IsUnixPeer(%q) = %v", tc.remote, u)
			}
		})
	}
}
