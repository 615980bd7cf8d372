//go:build traefik

package gatewaytest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The example as it is: exactly the limit passes, the app gets the
// rate-limit headers (the client does not), then 429 with Retry-After,
// the headers and Sluice's body; a client's X-Forwarded-* headers change
// neither its key nor its rule, and its X-Original-URL and X-Rewrite-URL
// do not reach the app.
func TestRealTraefikForwardAuth(t *testing.T) {
	rt := startRealTraefik(t, traefikSetup{})
	spoof := [][2]string{
		{"User-Agent", "curl/8.0"}, {"Cookie", "session=abc"},
		{"Connection", "keep-alive, X-Drop-Me"}, {"X-Drop-Me", "1"},
		{"X-Forwarded-For", "198.51.100.7"}, {"X-Real-Ip", "198.51.100.7"}, {"X_Forwarded_For", "198.51.100.8"},
		{"X-Forwarded-Host", "evil.example"}, {"X-Forwarded-Proto", "https"}, {"X-Forwarded-Port", "443"},
		{"X-Forwarded-Server", "evil"}, {"X-Forwarded-Prefix", "/x"},
		// Traefik passes Forwarded on; Sluice reads it only where no
		// X-Forwarded-For came, and ForwardAuth always sends one.
		{"Forwarded", "for=198.51.100.9"},
	}
	// Routing headers, which dynamic.yml's no-route-headers removes on
	// the way to the app (ForwardAuth passes them to Sluice).
	for _, name := range routeHeaderSpellings {
		spoof = append(spoof, [2]string{name, "/login"})
	}
	for i := range 3 {
		x := rt.ask(t, "127.0.0.2", wire{method: "GET", target: "/items?page=1", hdr: spoof})
		if i == 0 {
			t.Logf("what Traefik sent Sluice for a client's GET /items?page=1 with spoofed headers:\n%s", head(x.sent))
		}
		if x.real.status != http.StatusOK || x.real.body != "app\n" {
			t.Fatalf("request %d: got %v, want 200 from the app", i+1, x.real)
		}
		if got := x.sent.Header.Values("X-Forwarded-For"); !slices.Equal(got, []string{"127.0.0.2"}) {
			t.Errorf("request %d: Sluice got X-Forwarded-For %q, want the client's address alone", i+1, got)
		}
		// authResponseHeaders: the app gets them, the client does not.
		if x.appSaw == nil {
			t.Fatalf("request %d: the app saw nothing", i+1)
		}
		for name, v := range x.appSaw {
			if isRouteHeader(name) {
				t.Errorf("request %d: the app got %s: %q, want no X-Original-URL or X-Rewrite-URL in any spelling", i+1, name, v)
			}
		}
		for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
			if x.appSaw.Get(name) == "" {
				t.Errorf("request %d: the app got no %s", i+1, name)
			}
			if v := x.real.header.Get(name); v != "" {
				t.Errorf("request %d: the client got %s: %s; the docs say allowed answers reach the app only", i+1, name, v)
			}
		}
		if got, want := x.appSaw.Get("X-RateLimit-Remaining"), strconv.Itoa(2-i); got != want {
			t.Errorf("request %d: the app got X-RateLimit-Remaining %q, want %s", i+1, got, want)
		}
	}
	x := rt.ask(t, "127.0.0.2", wire{method: "GET", target: "/items?page=1", hdr: spoof})
	wantLimited(t, "request 4", x.real, "per-client")
	if got := rt.app.hits.Load(); got != 3 {
		t.Errorf("the app saw %d requests, want 3", got)
	}
	// Another client has its own count, whatever it claims.
	if x := rt.ask(t, "127.0.0.3", wire{method: "GET", target: "/", hdr: [][2]string{{"X-Forwarded-For", "127.0.0.2"}}}); x.real.status != http.StatusOK {
		t.Errorf("another client: got %v, want 200", x.real)
	}
	// A client that sends no User-Agent.
	rt.ask(t, "127.0.0.5", wire{method: "GET", target: "/"})
	// The original method and URI choose the rule; the client's own
	// X-Forwarded-Uri / -Method do not.
	if x := rt.ask(t, "127.0.0.4", wire{method: "POST", target: "/login", body: "user=a"}); x.real.status != http.StatusOK {
		t.Fatalf("first login: got %v, want 200", x.real)
	}
	x = rt.ask(t, "127.0.0.4", wire{method: "POST", target: "/login", body: "user=a",
		hdr: [][2]string{{"X-Forwarded-Uri", "/elsewhere"}, {"X-Forwarded-Method", "GET"}, {"X_Forwarded_Uri", "/elsewhere"}}})
	wantLimited(t, "second login, disguised", x.real, "login")
	t.Logf("what Traefik sent Sluice for the disguised login:\n%s", head(x.sent))
}

// Behind a load balancer, configured as traefik.yml's comment says (the
// balancer in the entry point's trustedIPs, trustForwardHeader: true, the
// balancer in Sluice's trusted_proxies), each client behind it has its own
// count, whatever it writes into X-Forwarded-For before the balancer's
// entry; and, as the comment warns, Traefik then believes the
// X-Forwarded-Uri and -Method the balancer passes on.
func TestRealTraefikBehindALoadBalancer(t *testing.T) {
	y := replace(t, sluiceYAML(t, "traefik/sluice.yaml", ""), "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: [127.0.0.1/32, "+lbAddr+"/32]")
	rt := startRealTraefik(t, traefikSetup{lb: lbAddr, trustForwardHeader: true, sluiceYAML: y})
	viaLB := func(xff string, more ...[2]string) exchange {
		t.Helper()
		return rt.ask(t, lbAddr, wire{method: "GET", target: "/items",
			hdr: append([][2]string{{"X-Forwarded-For", xff}, {"X-Forwarded-Proto", "https"}}, more...)})
	}
	for i := range 3 {
		x := viaLB("198.51.100.1")
		if i == 0 {
			t.Logf("what Traefik sent Sluice for a request the balancer passed on:\n%s", head(x.sent))
		}
		if x.real.status != http.StatusOK || x.appSaw.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Fatalf("198.51.100.1 request %d: got %v (the app saw X-RateLimit-Remaining %q), want 200 with %d left",
				i+1, x.real, x.appSaw.Get("X-RateLimit-Remaining"), 2-i)
		}
		if got, want := x.sent.Header.Get("X-Forwarded-For"), "198.51.100.1, "+lbAddr; got != want {
			t.Errorf("198.51.100.1 request %d: Sluice got X-Forwarded-For %q, want %q", i+1, got, want)
		}
	}
	wantLimited(t, "198.51.100.1 request 4", viaLB("198.51.100.1").real, "per-client")
	for i, xff := range []string{"203.0.113.7, 198.51.100.2", "198.51.100.1, 198.51.100.2"} {
		if x := viaLB(xff); x.real.status != http.StatusOK || x.appSaw.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Errorf("198.51.100.2 request %d (X-Forwarded-For %s): got %v, want 200 with %d left", i+1, xff, x.real, 2-i)
		}
	}
	// A balancer that passes a client's X-Forwarded-Uri and -Method on
	// lets it choose the rule: GET /items is counted as POST /login.
	x := viaLB("198.51.100.3", [2]string{"X-Forwarded-Uri", "/login"}, [2]string{"X-Forwarded-Method", "POST"})
	if got := x.sent.Header.Get("X-Forwarded-Uri") + " " + x.sent.Header.Get("X-Forwarded-Method"); got != "/login POST" {
		t.Errorf("with trustForwardHeader: true, Sluice got X-Forwarded-Uri and -Method %q, want the balancer's \"/login POST\"", got)
	}
	if got := x.appSaw.Get("RateLimit"); !strings.HasPrefix(got, `"login"`) {
		t.Errorf("GET /items with the balancer's X-Forwarded-Uri /login: the app got RateLimit %q, want the login rule's", got)
	}
}

// Listing the balancer in forwardedHeaders.trustedIPs alone, as
// traefik.yml warns, sends Sluice the balancer's address: every client
// behind it shares one count.
func TestRealTraefikTrustedIPsAlone(t *testing.T) {
	y := replace(t, sluiceYAML(t, "traefik/sluice.yaml", ""), "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: [127.0.0.1/32, "+lbAddr+"/32]")
	rt := startRealTraefik(t, traefikSetup{lb: lbAddr, sluiceYAML: y})
	for i, xff := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		x := rt.ask(t, lbAddr, wire{method: "GET", target: "/", hdr: [][2]string{{"X-Forwarded-For", xff}}})
		if got := x.sent.Header.Get("X-Forwarded-For"); got != lbAddr {
			t.Errorf("client %s: Sluice got X-Forwarded-For %q, want the balancer's %s alone", xff, got, lbAddr)
		}
		if x.real.status != http.StatusOK || x.appSaw.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Errorf("client %s: got %v (X-RateLimit-Remaining %q), want 200 with %d left of the shared count", xff, x.real, x.appSaw.Get("X-RateLimit-Remaining"), 2-i)
		}
	}
	x := rt.ask(t, lbAddr, wire{method: "GET", target: "/", hdr: [][2]string{{"X-Forwarded-For", "198.51.100.4"}}})
	wantLimited(t, "a fourth client behind the balancer", x.real, "per-client")
}

// With Sluice down, Traefik answers 500 and the app sees nothing.
func TestRealTraefikWithSluiceDown(t *testing.T) {
	rt := startRealTraefik(t, traefikSetup{})
	if x := rt.ask(t, "127.0.0.1", wire{method: "GET", target: "/"}); x.real.status != http.StatusOK {
		t.Fatalf("with Sluice up: got %v, want 200", x.real)
	}
	rt.sluice.stop(t)
	rt.tap.close()
	r := sendRaw(t, "127.0.0.1", rt.addr, wire{method: "GET", target: "/"}.raw(rt.addr))
	if r.status != http.StatusInternalServerError {
		t.Errorf("with Sluice down: got %v, want 500", r)
	}
	if got := rt.app.hits.Load(); got != 1 {
		t.Errorf("the app saw %d requests, want 1 (none with Sluice down)", got)
	}
}

// With a Sluice that takes the connection and never answers, Traefik
// gives up after its fixed 30 s and answers 500.
func TestRealTraefikWithSluiceStuck(t *testing.T) {
	t.Parallel() // waits out Traefik's timeout
	rt := startRealTraefik(t, traefikSetup{})
	rt.tap.stall()
	c, err := net.Dial("tcp", rt.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	// Only turns a hang into a failure.
	c.SetDeadline(start.Add(30*time.Second + startTimeout))
	if _, err := io.WriteString(c, wire{method: "GET", target: "/"}.raw(rt.addr)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("with Sluice stuck: %v", err)
	}
	resp.Body.Close()
	waited := time.Since(start)
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("with Sluice stuck: got %d, want 500", resp.StatusCode)
	}
	if waited < 30*time.Second {
		t.Errorf("with Sluice stuck: Traefik answered after %v, before its 30 s timeout", waited)
	}
	t.Logf("with Sluice stuck, Traefik answered %d after %v", resp.StatusCode, waited.Round(time.Millisecond))
	if got := rt.app.hits.Load(); got != 0 {
		t.Errorf("the app saw %d requests, want none", got)
	}
}
