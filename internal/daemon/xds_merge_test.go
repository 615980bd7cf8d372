package daemon

import (
	"os"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// grpc.merge_domains changed by a reload of the config file decides the
// xDS server's configs as it decides descriptor files: two configs of
// one domain, refused without it, are applied once it is on (the server
// sends the same version again), and a reload turning it off while they
// are in force is refused, as it is over files.
func TestXDSMergeDomainsReload(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	x.set("v1", rlc("a", "shop", perDay("tenant", "acme", 2)), rlc("b", "shop", perDay("user", "", 1)))
	nack := x.waitRequest("NACK", func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if !strings.Contains(nack.GetErrorDetail().GetMessage(), "already configured") {
		t.Fatalf("NACK %q: want the domain named twice", nack.GetErrorDetail().GetMessage())
	}
	data, err := os.ReadFile(ed.path)
	if err != nil {
		t.Fatal(err)
	}
	merged := strings.Replace(string(data), "grpc:\n", "grpc:\n  merge_domains: true\n", 1)
	if err := os.WriteFile(ed.path, []byte(merged), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ed.d.Reload(); err != nil {
		t.Fatalf("Reload with merge_domains: true: %v", err)
	}
	x.waitACK("v1")
	if got := ed.limitOf("shop", "user", "ann"); got != 1 {
		t.Errorf("v1 with merge_domains on: shop user limit %d, want 1", got)
	}
	if got := ed.limitOf("shop", "tenant", "acme"); got != 2 {
		t.Errorf("v1 with merge_domains on: shop tenant=acme limit %d, want 2", got)
	}

	if err := os.WriteFile(ed.path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ed.d.Reload(); err == nil || !strings.Contains(err.Error(), "already configured") {
		t.Errorf("Reload turning merge_domains off over two configs of one domain = %v, want a refusal naming the domain", err)
	}
	if !ed.d.Config().GRPC.MergeDomains {
		t.Error("after the refused reload, grpc.merge_domains is off")
	}
	if got := ed.limitOf("shop", "user", "ann"); got != 1 {
		t.Errorf("after the refused reload: shop user limit %d, want 1", got)
	}
}
