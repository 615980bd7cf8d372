package gatewaytest

import (
	"fmt"
	"strings"
	"testing"
)

// The Host a client sends, any host the gateway serves (a name, an IDN,
// in any case, with a port), changes neither whether it is counted nor
// its key. (A raw UTF-8 Host is no host: Caddy and Go apps answer 400.)
func TestGatewayHosts(t *testing.T) {
	hosts := []string{"api.example.com", "xn--bcher-kva.example", "API.Example.com:8000", "127.0.0.1"}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{})
			addr := strings.TrimPrefix(g.url, "http://")
			get := func(host string) result {
				return sendRaw(t, "127.0.0.9", addr, "GET /items HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
			}
			for i, host := range hosts[:3] {
				wantAllowed(t, fmt.Sprintf("request %d, Host %s", i+1, host), get(host), 2-i)
			}
			wantLimited(t, "request 4, Host "+hosts[3], get(hosts[3]), "per-client")
			if got := a.hits.Load(); got != 3 {
				t.Errorf("the app saw %d requests, want 3", got)
			}
		})
	}
}
