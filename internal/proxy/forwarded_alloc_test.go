package proxy

import (
	"net/netip"
	"testing"
)

var forwardedSink string

// The Forwarded value of the ReverseProxy path and the deferral queue
// costs one allocation, the string, even for the longest element: an
// IPv6 client and a long host.
func TestForwardedValueAllocs(t *testing.T) {
	ip := netip.MustParseAddr("2001:db8:1234:5678:9abc:def0:1234:5678")
	host := "[2001:db8:1234:5678:9abc:def0:1234:5679]:65535"
	if n := testing.AllocsPerRun(100, func() { forwardedSink = forwardedValue(ip, host, "https") }); n > 1 {
		t.Errorf("forwardedValue: %v allocations, want 1", n)
	}
	if want := `for="[2001:db8:1234:5678:9abc:def0:1234:5678]";host="` + host + `";proto=https`; forwardedSink != want {
		t.Errorf("forwardedValue = %q, want %q", forwardedSink, want)
	}
}
