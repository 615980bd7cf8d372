package gatewaytest

import (
	"fmt"
	"testing"
)

// A Sluice restarted on its address (a deploy) is asked again at once:
// the gateway's kept-alive connections to the old one, closed by its
// shutdown, cost no client a failure.
func TestGatewaySluiceRestart(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			y := sluiceYAML(t, k.sluice, "")
			s := startSluice(t, y)
			g := k.start(t, s.addr, a.addr(), variant{})
			c := client("127.0.0.80")
			for i := range 2 {
				wantAllowed(t, fmt.Sprintf("request %d to the first Sluice", i+1), send(t, c, "GET", g.url+"/", nil), 2-i)
			}
			s.stop(t)
			startSluiceOn(t, y, s.addr)
			// A memory store: the new Sluice counts afresh.
			for i := range 3 {
				wantAllowed(t, fmt.Sprintf("request %d to the new Sluice", i+1), send(t, c, "GET", g.url+"/", nil), 2-i)
			}
		})
	}
}
