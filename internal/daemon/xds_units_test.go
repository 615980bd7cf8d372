package daemon

import (
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// The units the reference service's RateLimitConfig has beyond DAY
// (MONTH = 5, YEAR = 6, WEEK = 7 in its rls_conf.proto; Envoy Gateway
// sends month and year limits) are read as the file format's month, year
// and week, not refused as unknown numbers.
func TestXDSLongUnits(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	per := func(value string, unit int32, n uint32) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: "plan", Value: value,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit(unit), RequestsPerUnit: n}}
	}
	x.set("v1", rlc("shop", "shop", per("month", 5, 50), per("year", 6, 60), per("week", 7, 70)))
	x.waitACK("v1")
	for _, c := range []struct {
		value string
		want  uint32
	}{{"month", 50}, {"year", 60}, {"week", 70}} {
		if got := ed.limitOf("shop", "plan", c.value); got != c.want {
			t.Errorf("plan=%s: limit %d, want %d", c.value, got, c.want)
		}
	}
}
