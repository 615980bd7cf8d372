package gatewaytest

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Traefik is not in Debian's packages, so its ForwardAuth middleware is
// played by traefik.authRequest: the request it sends the auth server for a
// client's request, header for header, as Traefik v3.7.13 builds it
// (pkg/middlewares/forwardedheaders, pkg/middlewares/auth/forward.go).
// traefik_real_test.go (`make check-traefik`, with a real Traefik) plays
// every request it sends through both and fails where what reaches Sluice
// differs.
//
//   - The entry point, for a client outside forwardedHeaders.trustedIPs
//     (by default every client), deletes its X-Forwarded-* headers, X-Real-Ip
//     included, and their spellings with "_"; then sets X-Real-Ip,
//     X-Forwarded-Proto, -Port and -Host where they are not set (a trusted
//     peer's stay), joins X-Forwarded-For's lines into one, sets
//     X-Forwarded-Server (its host name), and deletes the headers the
//     Connection header names (but those X-Forwarded-* ones) and Connection.
//   - ForwardAuth copies every request header, drops the hop-by-hop ones
//     (Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade) and, with
//     trustForwardHeader: false, every X-Forwarded-* header and X-Real-Ip:
//     the entry point's X-Real-Ip and X-Forwarded-Server never reach the
//     auth server. When the client sent no User-Agent, it sends none (not
//     Go's). It sets X-Forwarded-For to the peer's address (with
//     trustForwardHeader, appended to the X-Forwarded-For it kept), and
//     X-Forwarded-Method, -Proto, -Port, -Host and -Uri from the request
//     where they are not there (with trustForwardHeader, the trusted peer's
//     stay). The request is a GET to the address, without a body (no
//     forwardBody), sent by Go's client (which adds Accept-Encoding).
//   - An answer outside 2xx goes back to the client with its status, body
//     and headers (hop-by-hop ones dropped); on a 2xx, the
//     authResponseHeaders are copied onto the request to the app.
//
// traefik says how the entry point and the middleware are configured.
type traefik struct {
	trustedPeer        bool // the peer is in the entry point's forwardedHeaders.trustedIPs
	trustForwardHeader bool
}

// traefikManaged are the headers Traefik deletes from an untrusted peer's
// request, and ForwardAuth without trustForwardHeader.
var traefikManaged = []string{"X-Forwarded-Proto", "X-Forwarded-For", "X-Forwarded-Host",
	"X-Forwarded-Port", "X-Forwarded-Server", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Forwarded-Prefix",
	"X-Forwarded-Tls-Client-Cert", "X-Forwarded-Tls-Client-Cert-Info", "X-Real-Ip"}

func traefikIsManaged(k string) bool {
	return slices.Contains(traefikManaged, http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-")))
}

func (tr traefik) authRequest(t *testing.T, client *http.Request, remoteAddr, address string) *http.Request {
	t.Helper()
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		t.Fatal(err)
	}
	deleteManaged := func(h http.Header) {
		for k := range h {
			if traefikIsManaged(k) {
				delete(h, k)
			}
		}
	}
	setIfEmpty := func(h http.Header, k, v string) {
		if h.Get(k) == "" {
			h.Set(k, v)
		}
	}
	setIfAbsent := func(h http.Header, k, v string) {
		if _, ok := h[k]; !ok {
			h.Set(k, v)
		}
	}
	// forwardedPort is the port of the Host, else 443 for https, else 80.
	forwardedPort := func(h http.Header) string {
		if _, p, err := net.SplitHostPort(client.Host); err == nil && p != "" {
			return p
		}
		if p := h.Get("X-Forwarded-Proto"); p == "https" || p == "wss" {
			return "443"
		}
		return "80"
	}
	hostname, err := os.Hostname()
	if err != nil {
		hostname = "localhost"
	}

	// The entry point.
	h := client.Header.Clone()
	if !tr.trustedPeer {
		deleteManaged(h)
	}
	setIfEmpty(h, "X-Real-Ip", ip)
	setIfEmpty(h, "X-Forwarded-Proto", "http")
	setIfEmpty(h, "X-Forwarded-Port", forwardedPort(h))
	setIfEmpty(h, "X-Forwarded-Host", client.Host)
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		h.Set("X-Forwarded-For", strings.Join(xff, ", "))
	}
	h.Set("X-Forwarded-Server", hostname)
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" && !traefikIsManaged(name) {
				h.Del(name)
			}
		}
	}
	h.Del("Connection")

	// The middleware.
	fwd, err := http.NewRequest(http.MethodGet, address, nil)
	if err != nil {
		t.Fatal(err)
	}
	fwd.Header = h.Clone()
	for _, hop := range []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		fwd.Header.Del(hop)
	}
	if !tr.trustForwardHeader {
		deleteManaged(fwd.Header)
	}
	if _, ok := h["User-Agent"]; !ok {
		fwd.Header.Set("User-Agent", "") // Go's client then sends none
	}
	xff := ip
	if prior, ok := fwd.Header["X-Forwarded-For"]; ok {
		xff = strings.Join(prior, ", ") + ", " + ip
	}
	fwd.Header.Set("X-Forwarded-For", xff)
	setIfAbsent(fwd.Header, "X-Forwarded-Method", client.Method)
	setIfAbsent(fwd.Header, "X-Forwarded-Proto", "http")
	setIfAbsent(fwd.Header, "X-Forwarded-Port", forwardedPort(fwd.Header))
	setIfAbsent(fwd.Header, "X-Forwarded-Host", client.Host)
	setIfAbsent(fwd.Header, "X-Forwarded-Uri", client.URL.RequestURI())
	return fwd
}

// traefikConfig is the part of examples/gateways/traefik/dynamic.yml the
// test relies on.
type traefikConfig struct {
	HTTP struct {
		Routers map[string]struct {
			Middlewares []string `yaml:"middlewares"`
		} `yaml:"routers"`
		Middlewares map[string]struct {
			ForwardAuth struct {
				Address             string   `yaml:"address"`
				TrustForwardHeader  *bool    `yaml:"trustForwardHeader"`
				AuthResponseHeaders []string `yaml:"authResponseHeaders"`
			} `yaml:"forwardAuth"`
			Headers struct {
				CustomRequestHeaders map[string]string `yaml:"customRequestHeaders"`
			} `yaml:"headers"`
		} `yaml:"middlewares"`
	} `yaml:"http"`
}

func TestTraefikForwardAuth(t *testing.T) {
	var tc traefikConfig
	if err := yaml.Unmarshal([]byte(example(t, "traefik/dynamic.yml")), &tc); err != nil {
		t.Fatal(err)
	}
	fa := tc.HTTP.Middlewares["sluice"].ForwardAuth
	u, err := url.Parse(fa.Address)
	if err != nil || u.Path != "/v1/forward-auth" || u.Host != "127.0.0.1:8080" {
		t.Fatalf("dynamic.yml: forwardAuth.address = %q, want http://127.0.0.1:8080/v1/forward-auth", fa.Address)
	}
	if fa.TrustForwardHeader == nil || *fa.TrustForwardHeader {
		t.Errorf("dynamic.yml: trustForwardHeader must be false")
	}

	s := startSluice(t, sluiceYAML(t, "traefik/sluice.yaml", ""))
	address := "http://" + s.addr + u.Path
	conn := client("127.0.0.1") // Traefik's connections to Sluice

	// ask plays one client request through Traefik's ForwardAuth.
	ask := func(method, target, remoteAddr string, hdr map[string]string) result {
		t.Helper()
		req, err := http.NewRequest(method, "http://api.example.com"+target, strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", "curl/8.0")
		req.Header.Set("Cookie", "session=abc")
		req.Header.Set("Connection", "keep-alive, X-Drop-Me")
		req.Header.Set("X-Drop-Me", "1")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return send(t, conn, "GET", "", nil, traefik{}.authRequest(t, req, remoteAddr, address))
	}

	spoof := map[string]string{"X-Forwarded-For": "198.51.100.7", "X-Real-Ip": "198.51.100.7", "X_Forwarded_For": "198.51.100.8",
		"Forwarded": "for=198.51.100.9"} // passed on, and not read beside X-Forwarded-For
	for i := range 3 {
		r := ask("GET", "/items?page=1", "127.0.0.2:50000", spoof)
		if r.status != http.StatusOK {
			t.Fatalf("request %d: got %v, want 200", i+1, r)
		}
		// Every header dynamic.yml copies to the app is in the answer.
		for _, name := range fa.AuthResponseHeaders {
			if r.header.Get(name) == "" {
				t.Errorf("request %d: no %s for authResponseHeaders to copy (%v)", i+1, name, r)
			}
		}
		if got, want := r.header.Get("X-RateLimit-Remaining"), fmt.Sprint(2-i); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining = %q, want %s", i+1, got, want)
		}
	}
	// The 429 Traefik hands to the client as it is.
	wantLimited(t, "request 4", ask("GET", "/items?page=1", "127.0.0.2:50001", spoof), "per-client")
	// Another client has its own count, whatever it claims.
	if r := ask("GET", "/", "127.0.0.3:50000", map[string]string{"X-Forwarded-For": "127.0.0.2"}); r.status != http.StatusOK {
		t.Errorf("another client: got %v, want 200", r)
	}
	// The original method and URI choose the rule; the client's own
	// X-Forwarded-Uri / -Method do not.
	if r := ask("POST", "/login", "127.0.0.4:50000", nil); r.status != http.StatusOK {
		t.Fatalf("first login: got %v, want 200", r)
	}
	wantLimited(t, "second login, disguised",
		ask("POST", "/login", "127.0.0.4:50000", map[string]string{"X-Forwarded-Uri": "/elsewhere", "X-Forwarded-Method": "GET"}), "login")
}

// Behind a load balancer, configured as traefik.yml's comment says (the
// balancer in the entry point's trustedIPs, trustForwardHeader: true, and
// in Sluice's trusted_proxies), each client behind the balancer has its
// own count, whatever it writes into X-Forwarded-For before the
// balancer's entry.
func TestTraefikBehindALoadBalancer(t *testing.T) {
	y := replace(t, sluiceYAML(t, "traefik/sluice.yaml", ""), "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: [127.0.0.1/32, "+lbAddr+"/32]")
	s := startSluice(t, y)
	address := "http://" + s.addr + "/v1/forward-auth"
	conn := client("127.0.0.1")
	tr := traefik{trustedPeer: true, trustForwardHeader: true}
	// viaLB plays a request the balancer passes on: it appended the
	// client's address to X-Forwarded-For and removed the client's
	// X-Forwarded-Method and -Uri.
	viaLB := func(xff string) result {
		t.Helper()
		req, err := http.NewRequest("GET", "http://api.example.com/items", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", xff)
		req.Header.Set("X-Forwarded-Proto", "https")
		return send(t, conn, "GET", "", nil, tr.authRequest(t, req, lbAddr+":40000", address))
	}
	for i := range 3 {
		if r := viaLB("198.51.100.1"); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != fmt.Sprint(2-i) {
			t.Fatalf("198.51.100.1 request %d: got %v, want 200 with %d left", i+1, r, 2-i)
		}
	}
	wantLimited(t, "198.51.100.1 request 4", viaLB("198.51.100.1"), "per-client")
	for i, xff := range []string{"203.0.113.7, 198.51.100.2", "198.51.100.1, 198.51.100.2"} {
		if r := viaLB(xff); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != fmt.Sprint(2-i) {
			t.Errorf("198.51.100.2 request %d (X-Forwarded-For %s): got %v, want 200 with %d left", i+1, xff, r, 2-i)
		}
	}
}
