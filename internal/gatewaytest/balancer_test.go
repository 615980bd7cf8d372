package gatewaytest

import (
	"fmt"
	"strings"
	"testing"
)

// lbAddr is the load balancer in front of the gateway: a client of the
// gateway that sets X-Forwarded-For, as balancers do.
const lbAddr = "127.0.0.20"

// Behind a load balancer, configured as the example's comments say, each
// client behind the balancer has its own count; what a client writes into
// X-Forwarded-For before the balancer's entry changes nothing, and neither
// does X-Forwarded-For from anyone but the balancer.
func TestGatewayBehindALoadBalancer(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			y := sluiceYAML(t, k.sluice, "")
			if k.lbInSluice {
				y = replace(t, y, "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: [127.0.0.1/32, "+lbAddr+"/32]")
			}
			s := startSluice(t, y)
			g := k.start(t, s.addr, a.addr(), variant{lb: lbAddr + "/32"})
			viaLB := func(xff string) result {
				return send(t, client(lbAddr), "GET", g.url+"/items", map[string]string{"X-Forwarded-For": xff})
			}
			for i := range 3 {
				wantAllowed(t, fmt.Sprintf("198.51.100.1 request %d", i+1), viaLB("198.51.100.1"), 2-i)
			}
			wantLimited(t, "198.51.100.1 request 4", viaLB("198.51.100.1"), "per-client")
			// Another client behind the balancer, claiming to be someone
			// else before the balancer's entry.
			wantAllowed(t, "198.51.100.2 request 1", viaLB("203.0.113.7, 198.51.100.2"), 2)
			wantAllowed(t, "198.51.100.2 request 2", viaLB("198.51.100.1, 198.51.100.2"), 1)
			// A client that is not the balancer is its own address,
			// whatever X-Forwarded-For it sends.
			wantAllowed(t, "127.0.0.21, not the balancer", send(t, client("127.0.0.21"), "GET", g.url+"/items",
				map[string]string{"X-Forwarded-For": "198.51.100.2"}), 2)
			if got := a.hits.Load(); got != 6 {
				t.Errorf("the app saw %d requests, want 6", got)
			}
		})
	}
}

// A Sluice whose trusted_proxies leave the gateway out (the gateway in
// another container, say) counts every client as the gateway, and says
// so in its log, naming the gateway.
func TestGatewayNotTrusted(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, replace(t, sluiceYAML(t, k.sluice, ""), "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: [10.0.0.0/8]"))
			g := k.start(t, s.addr, a.addr(), variant{})
			wantAllowed(t, "127.0.0.2 request 1", send(t, client("127.0.0.2"), "GET", g.url+"/", nil), 2)
			wantAllowed(t, "127.0.0.3 request 1, counted as the gateway", send(t, client("127.0.0.3"), "GET", g.url+"/", nil), 1)
			if logs := s.logs.String(); !strings.Contains(logs, "trusted_proxies does not list it") || !strings.Contains(logs, "gateway=127.0.0.1") {
				t.Errorf("Sluice's log says nothing of the gateway it does not believe:\n%s", logs)
			}
		})
	}
}
