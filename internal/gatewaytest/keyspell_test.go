package gatewaytest

import (
	"fmt"
	"strings"
	"testing"
)

// A rule keyed on the Host or on a cookie counts the value the app
// behind reads, however the client spells it: once a site's or a
// session's limit is spent, another spelling of it is refused 429 and
// never reaches the app. nginx sends its $host (case folded, no port, no
// final dot), Caddy the Host as the client wrote it; a site answers
// "A.Example:8000" and "a.example." as "a.example". PHP, Express and
// Rack read the cookie "sid=%61bc" as "abc".
func TestGatewayKeySpellings(t *testing.T) {
	const rules = "  - name: per-site\n    key: [\"header:Host\"]\n    rate: 1/h\n" +
		"  - name: per-session\n    key: [\"cookie:sid\"]\n    rate: 1/h\n"
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			y := sluiceYAML(t, k.sluice, "")
			if !strings.HasSuffix(y, "\n") {
				y += "\n"
			}
			s := startSluice(t, y+rules)
			g := k.start(t, s.addr, a.addr(), variant{})
			addr := strings.TrimPrefix(g.url, "http://")
			src := 0
			get := func(host, cookie string) result {
				src++
				if cookie != "" {
					cookie = "Cookie: " + cookie + "\r\n"
				}
				return sendRaw(t, fmt.Sprintf("127.0.8.%d", src), addr, "GET /items HTTP/1.1\r\nHost: "+host+"\r\n"+cookie+"Connection: close\r\n\r\n")
			}
			if r := get("a.example", ""); r.status != 200 || r.body != "app\n" {
				t.Fatalf("Host a.example: got %v, want 200 from the app", r)
			}
			for _, h := range []string{"A.example", "a.EXAMPLE:8000", "a.example.", "A.Example.:1"} {
				before := a.hits.Load()
				wantLimited(t, "Host "+h+" after a.example's limit was spent", get(h, ""), "per-site")
				if a.hits.Load() != before {
					t.Errorf("Host %s after a.example's limit was spent reached the app", h)
				}
			}
			// Nor does a forwarding header of the client's own, or another
			// Host beside an absolute target (the target's host is the
			// request's: nginx's $host, Go's r.Host, what the app is asked).
			for _, req := range []string{
				"GET /items HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-Host: fresh1.example\r\nForwarded: host=fresh2.example\r\n",
				"GET http://a.example/items HTTP/1.1\r\nHost: fresh3.example\r\n",
			} {
				src++
				before := a.hits.Load()
				what := fmt.Sprintf("%.50q after a.example's limit was spent", req)
				wantLimited(t, what, sendRaw(t, fmt.Sprintf("127.0.8.%d", src), addr, req+"Connection: close\r\n\r\n"), "per-site")
				if a.hits.Load() != before {
					t.Errorf("%s reached the app", what)
				}
			}
			if r := get("b.example", "sid=abc"); r.status != 200 || r.body != "app\n" {
				t.Fatalf("Cookie sid=abc: got %v, want 200 from the app", r)
			}
			for i, c := range []string{"sid=%61bc", "sid=a%62%63", `sid="%61bc"`, "sid=xyz; sid=%61bc"} {
				before := a.hits.Load()
				wantLimited(t, "Cookie "+c+" after abc's limit was spent", get(fmt.Sprintf("c%d.example", i), c), "per-session")
				if a.hits.Load() != before {
					t.Errorf("Cookie %s after abc's limit was spent reached the app", c)
				}
			}
		})
	}
}

// A '#' hides no query parameter from a query key: nginx and Caddy pass
// the target on as it came, and a Go app reads "/items?x=1#&api_key=k"
// and "/items#x?api_key=k" as api_key=k (PHP through Caddy's
// php_fastcgi reads past the '#' too). Once victim is spent, each
// is refused 429 and never reaches the app.
func TestGatewayQueryPastFragment(t *testing.T) {
	const rules = "  - name: per-key\n    key: [\"query:api_key\"]\n    rate: 1/h\n"
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			y := sluiceYAML(t, k.sluice, "")
			if !strings.HasSuffix(y, "\n") {
				y += "\n"
			}
			s := startSluice(t, y+rules)
			g := k.start(t, s.addr, a.addr(), variant{})
			addr := strings.TrimPrefix(g.url, "http://")
			src := 0
			get := func(target string) result {
				src++
				return sendRaw(t, fmt.Sprintf("127.0.9.%d", src), addr, "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			}
			if r := get("/items?api_key=victim"); r.status != 200 || r.body != "app\n" {
				t.Fatalf("api_key=victim: got %v, want 200 from the app", r)
			}
			for _, target := range []string{"/items?x=1#&api_key=victim", "/items#x?api_key=victim", "/items?api_key=fresh#&api_key=victim"} {
				before := a.hits.Load()
				wantLimited(t, target+" after victim was spent", get(target), "per-key")
				if a.hits.Load() != before {
					t.Errorf("%s after victim was spent reached the app as %q", target, *a.target.Load())
				}
			}
		})
	}
}
