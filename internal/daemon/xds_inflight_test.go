package daemon

import (
	"fmt"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// TestXDSUpdatesWhileCallsInFlight: the xDS server sends version after
// version (a sibling added and dropped: a change that keeps the other
// limit's counters) while callers keep asking. Every call is answered,
// none fails; tenant=acme admits exactly its 100 over the whole run, as
// without updates; and sluice_envoy_hits_total counts each call once.
// Run with -race, it also checks the swap of the descriptors against the
// calls reading them.
func TestXDSUpdatesWhileCallsInFlight(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	version := func(i int) {
		ds := []*rlsconf.RateLimitDescriptor{perDay("tenant", "acme", 100)}
		if i%2 == 1 {
			ds = append(ds, perDay("coupon", "", 1))
		}
		v := fmt.Sprint("v", i)
		x.set(v, rlc("shop", "shop", ds...))
		x.waitACK(v)
	}
	version(0)

	// Counted by tenant (a call that coupon, once over, refuses counts
	// nothing).
	req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*commonv3.RateLimitDescriptor{entries("tenant", "acme"), entries("coupon", "c")}}
	const updates = 12
	n, admitted, failed := askDuring(t, ed, req, func() {
		for i := 1; i <= updates; i++ {
			version(i)
		}
	})
	t.Logf("%d calls over %d updates", n, updates)
	if admitted != 100 {
		t.Errorf("tenant=acme admitted %d of %d calls over %d updates, want exactly 100: counters kept, none counted twice", admitted, n, updates)
	}
	if got := ed.metric("sluice_envoy_hits_total", "domain", "shop", "descriptor", "tenant_acme"); got != float64(n-failed) {
		t.Errorf("sluice_envoy_hits_total{tenant_acme} = %v, want %d (each call once)", got, n-failed)
	}
}
