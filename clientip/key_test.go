package clientip

import (
	"net/netip"
	"testing"
)

func TestPrefixesKey(t *testing.T) {
	tests := []struct {
		p    Prefixes
		addr string
		want string
	}{
		{Prefixes{}, "192.0.2.1", "192.0.2.1"},
		{Prefixes{}, "::ffff:192.0.2.1", "192.0.2.1"},
		{Prefixes{}, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{Prefixes{}, "2001:db8:1:2::1%eth0", "2001:db8:1:2::/64"},
		{Prefixes{}, "::1", "::/64"},
		{Prefixes{IPv6: 128}, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6"},
		{Prefixes{IPv6: 48}, "2001:db8:1:2:3:4:5:6", "2001:db8:1::/48"},
		{Prefixes{IPv6: 56}, "2001:db8:1:2ff:3:4:5:6", "2001:db8:1:200::/56"},
		{Prefixes{IPv4: 24}, "192.0.2.77", "192.0.2.0/24"},
		{Prefixes{IPv4: 24}, "::ffff:192.0.2.77", "192.0.2.0/24"},
		{Prefixes{IPv4: 24, IPv6: 128}, "2001:db8::1", "2001:db8::1"},
	}
	for _, tt := range tests {
		if got := tt.p.Key(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("%+v.Key(%s) = %q, want %q", tt.p, tt.addr, got, tt.want)
		}
	}
	if got := (Prefixes{}).Key(netip.Addr{}); got != "" {
		t.Errorf("Key(invalid) = %q, want empty", got)
	}
}

// Addresses inside one prefix share a key; addresses across a prefix
// boundary do not.
func TestPrefixesInsideAndAcross(t *testing.T) {
	p := Prefixes{}
	same := [][2]string{
		{"2001:db8:a:b::1", "2001:db8:a:b:ffff:ffff:ffff:ffff"},
		{"2001:db8:a:b::1", "2001:db8:a:b:1234::99"},
		{"192.0.2.1", "::ffff:192.0.2.1"},
	}
	differ := [][2]string{
		{"2001:db8:a:b::1", "2001:db8:a:c::1"},
		{"2001:db8:a:b:ffff:ffff:ffff:ffff", "2001:db8:a:c::"},
		{"192.0.2.1", "192.0.2.2"},
		{"::ffff:192.0.2.1", "::192.0.2.1"}, // IPv4-compatible is IPv6
	}
	for _, pr := range same {
		if a, b := p.Key(netip.MustParseAddr(pr[0])), p.Key(netip.MustParseAddr(pr[1])); a != b {
			t.Errorf("%s and %s: keys %q and %q, want one key", pr[0], pr[1], a, b)
		}
	}
	for _, pr := range differ {
		if a, b := p.Key(netip.MustParseAddr(pr[0])), p.Key(netip.MustParseAddr(pr[1])); a == b {
			t.Errorf("%s and %s: both key %q, want two keys", pr[0], pr[1], a)
		}
	}
}
