package gatewaytest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A client's forwarding headers, sent twice, in other spellings (in any
// case), or as Forwarded and X-Real-IP, change neither its key nor the
// rule that applies.
func TestGatewayIgnoresDuplicatedHeaders(t *testing.T) {
	spoof := "X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-For: 198.51.100.2\r\n" +
		"x-forwarded-for: 198.51.100.3\r\nForwarded: for=198.51.100.4\r\nX-Real-IP: 198.51.100.5\r\n" +
		"X-Forwarded-Uri: /elsewhere\r\nX-Forwarded-Uri: /other\r\nX-Forwarded-Method: GET\r\nX-Forwarded-Method: GET\r\n" +
		"X-Original-URI: /elsewhere\r\nX-Original-Method: GET\r\nX-Forwarded-Host: other.example\r\n" +
		"x-forwarded-uri: /elsewhere\r\nX-FORWARDED-METHOD: GET\r\nx-original-uri: /other\r\nX-ORIGINAL-METHOD: GET\r\nx-forwarded-host: other.example\r\n"
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{})
			addr := strings.TrimPrefix(g.url, "http://")
			req := func(method, target string) string {
				return method + " " + target + " HTTP/1.1\r\nHost: " + addr + "\r\n" + spoof + "Content-Length: 0\r\nConnection: close\r\n\r\n"
			}
			for i := range 3 {
				wantAllowed(t, fmt.Sprintf("request %d", i+1), sendRaw(t, "127.0.0.30", addr, req("GET", "/items")), 2-i)
			}
			wantLimited(t, "request 4", sendRaw(t, "127.0.0.30", addr, req("GET", "/items")), "per-client")

			if r := sendRaw(t, "127.0.0.31", addr, req("POST", "/login")); r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("RateLimit"), `"login";r=0;`) {
				t.Fatalf("first login: got %v, want 200 with login's headers, 0 left", r)
			}
			wantLimited(t, "second login", sendRaw(t, "127.0.0.31", addr, req("POST", "/login")), "login")
			if got := a.hits.Load(); got != 4 {
				t.Errorf("the app saw %d requests, want 4", got)
			}
		})
	}
}
