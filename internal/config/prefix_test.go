package config

import (
	"net/netip"
	"strings"
	"testing"
)

// TestParsePrefixUnmaps: a trusted proxy written in IPv4-mapped IPv6 form,
// as a dual-stack listener shows it, is kept as the IPv4 address or prefix
// it stands for (client addresses are compared unmapped), a CIDR as a
// single address is.
func TestParsePrefixUnmaps(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:192.0.2.1":     "192.0.2.1/32",
		"::ffff:10.0.0.0/104":  "10.0.0.0/8",
		"::ffff:192.0.2.7/128": "192.0.2.7/32",
		"::ffff:0.0.0.0/96":    "0.0.0.0/0",
		"10.0.0.0/8":           "10.0.0.0/8",
		"fd00::/8":             "fd00::/8",
	} {
		got, err := parsePrefix(in)
		if err != nil || got != netip.MustParsePrefix(want) {
			t.Errorf("parsePrefix(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parsePrefix("::ffff:10.0.0.1/104"); err == nil || !strings.Contains(err.Error(), "did you mean") {
		t.Errorf("parsePrefix(\"::ffff:10.0.0.1/104\"): %v; want the bits past the prefix refused", err)
	}
}
