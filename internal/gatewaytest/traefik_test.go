package gatewaytest

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Traefik is not in Debian's packages, so its ForwardAuth middleware is
// played by traefikAuthRequest: the request it sends the auth server for a
// client's request, header for header, as Traefik v3 builds it. Facts from
// Traefik's sources (pkg/middlewares/forwardedheaders,
// pkg/middlewares/auth/forward.go):
//
//   - the entry point, for a client outside forwardedHeaders.trustedIPs
//     (by default every client), deletes its X-Forwarded-* headers, X-Real-Ip
//     and X-Scheme included, and the headers its Connection header names;
//     then sets X-Real-Ip, X-Forwarded-Proto, -Port and -Host where they are
//     not set (a trusted peer's stay), joins X-Forwarded-For's lines into one,
//     and sets X-Forwarded-Server;
//   - ForwardAuth copies every request header, drops the hop-by-hop ones
//     (Connection and the headers it names, Keep-Alive, TE, Trailer,
//     Transfer-Encoding, Upgrade) and sets X-Forwarded-For (the peer's
//     address; with trustForwardHeader, appended to the X-Forwarded-For it
//     got), -Method, -Proto, -Host and -Uri from the request, or with
//     trustForwardHeader from the headers of these names when set, and
//     -Port too; the request is a GET to the address, without a body (no
//     forwardBody), sent by Go's client, which adds its own User-Agent
//     when the client sent none (ForwardAuth sets none);
//   - an answer outside 2xx goes back to the client with its status, body
//     and headers (hop-by-hop ones dropped); on a 2xx, the
//     authResponseHeaders are copied onto the request to the app.
//
// traefik says how the entry point and the middleware are configured.
type traefik struct {
	trustedPeer        bool // the peer is in the entry point's forwardedHeaders.trustedIPs
	trustForwardHeader bool
}

func (tr traefik) authRequest(t *testing.T, client *http.Request, remoteAddr, address string) *http.Request {
	t.Helper()
	managed := []string{"X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Port", "X-Forwarded-Server", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Forwarded-Prefix",
		"X-Forwarded-Tls-Client-Cert", "X-Forwarded-Tls-Client-Cert-Info", "X-Scheme", "X-Real-Ip"}
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		t.Fatal(err)
	}
	port := "80"
	if _, p, err := net.SplitHostPort(client.Host); err == nil {
		port = p
	}
	dropConnection := func(h http.Header) {
		for _, f := range h.Values("Connection") {
			for _, name := range strings.Split(f, ",") {
				h.Del(strings.TrimSpace(name))
			}
		}
		h.Del("Connection")
	}
	setIfEmpty := func(h http.Header, k, v string) {
		if h.Get(k) == "" {
			h.Set(k, v)
		}
	}

	// The entry point.
	h := client.Header.Clone()
	if !tr.trustedPeer {
		for k := range h {
			for _, m := range managed {
				if http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-")) == m {
					delete(h, k)
				}
			}
		}
	}
	dropConnection(h)
	setIfEmpty(h, "X-Real-Ip", ip)
	setIfEmpty(h, "X-Forwarded-Proto", "http")
	setIfEmpty(h, "X-Forwarded-Port", port)
	setIfEmpty(h, "X-Forwarded-Host", client.Host)
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		h.Set("X-Forwarded-For", strings.Join(xff, ", "))
	}
	h.Set("X-Forwarded-Server", "traefik-host")

	// The middleware.
	fwd, err := http.NewRequest(http.MethodGet, address, nil)
	if err != nil {
		t.Fatal(err)
	}
	fwd.Header = h.Clone()
	dropConnection(fwd.Header)
	for _, hop := range []string{"Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		fwd.Header.Del(hop)
	}
	trusted := func(k, v string) string {
		if got := h.Get(k); got != "" && tr.trustForwardHeader {
			return got
		}
		return v
	}
	xff := ip
	if prior, ok := h["X-Forwarded-For"]; ok && tr.trustForwardHeader {
		xff = strings.Join(prior, ", ") + ", " + ip
	}
	fwd.Header.Set("X-Forwarded-For", xff)
	fwd.Header.Set("X-Forwarded-Method", trusted("X-Forwarded-Method", client.Method))
	fwd.Header.Set("X-Forwarded-Proto", trusted("X-Forwarded-Proto", "http"))
	if p := h.Get("X-Forwarded-Port"); p != "" && tr.trustForwardHeader {
		fwd.Header.Set("X-Forwarded-Port", p)
	}
	fwd.Header.Set("X-Forwarded-Host", trusted("X-Forwarded-Host", client.Host))
	fwd.Header.Set("X-Forwarded-Uri", trusted("X-Forwarded-Uri", client.URL.RequestURI()))
	return fwd
}

// traefikConfig is the part of examples/gateways/traefik/dynamic.yml the
// test relies on.
type traefikConfig struct {
	HTTP struct {
		Middlewares map[string]struct {
			ForwardAuth struct {
				Address             string   `yaml:"address"`
				TrustForwardHeader  *bool    `yaml:"trustForwardHeader"`
				AuthResponseHeaders []string `yaml:"authResponseHeaders"`
			} `yaml:"forwardAuth"`
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

	spoof := map[string]string{"X-Forwarded-For": "198.51.100.7", "X-Real-Ip": "198.51.100.7", "X_Forwarded_For": "198.51.100.8"}
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
