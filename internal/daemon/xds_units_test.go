package daemon

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
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

// quota_mode (7) is on a RateLimitDescriptor of the reference's newer
// rls_conf.proto, which the Go package used here predates; a server built
// on it (Envoy Gateway) sends it as such, and the reference service reads
// it. Two quota descriptors deny only together: with the first over its
// limit and the second under, the request passes, as there.
func TestXDSQuotaMode(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	quota := func(key string, n uint32) *rlsconf.RateLimitDescriptor {
		d := perDay(key, "", n)
		d.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1))
		return d
	}
	x.set("v1", rlc("shop", "shop", quota("team", 1), quota("org", 3)))
	x.waitACK("v1")
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		r := ed.ask("shop", entries("team", "a"), entries("org", "b"))
		if r.OverallCode != want {
			t.Fatalf("request %d: %v (statuses %v), want %v: team over its 1 a day denies only with org over its 3", i+1, r.OverallCode, r.Statuses, want)
		}
	}
}
