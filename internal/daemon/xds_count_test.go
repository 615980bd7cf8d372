package daemon

import (
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A response whose resources cannot be read as RateLimitConfigs (here
// bytes that are not UTF-8 where its name, a string, is) is refused as a
// config that does not load is: NACKed, and counted once as a failed
// reload.
func TestXDSUnreadableResponseCounted(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	x.set("v1", rlc("shop", "shop", perDay("tenant", "acme", 2)))
	x.waitACK("v1")
	failures := ed.metric("sluice_config_reloads_total", "result", "failure")

	snap, err := cachev3.NewSnapshot("v2", map[resource.Type][]types.Resource{
		resource.RateLimitConfigType: {&wrapperspb.BytesValue{Value: []byte{0xff, 0xfe}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(t.Context(), xdsNodeID, snap); err != nil {
		t.Fatal(err)
	}
	nack := x.waitRequest("NACK", func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "resources[0]") {
		t.Errorf("NACK %q: want it to name resources[0]", msg)
	}
	// Sent again after the NACK: still counted once.
	x.waitRequest("second NACK", func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if got := ed.metric("sluice_config_reloads_total", "result", "failure"); got != failures+1 {
		t.Errorf("sluice_config_reloads_total{result=failure} = %v after an unreadable response, want %v", got, failures+1)
	}
	if got := ed.limitOf("shop", "tenant", "acme"); got != 2 {
		t.Errorf("after the NACK, shop tenant=acme limit %d, want 2 (v1 stays)", got)
	}
}
