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
// client's request, header for header, as Traefik v3 builds it with the
// entry point's defaults (no forwardedHeaders.trustedIPs) and the
// middleware's trustForwardHeader: false, as examples/gateways/traefik
// configures it. Facts from Traefik's sources
// (pkg/middlewares/forwardedheaders, pkg/middlewares/auth/forward.go):
//
//   - the entry point deletes the X-Forwarded-* headers of an untrusted
//     client, X-Real-Ip and X-Scheme included, and the headers its
//     Connection header names; then sets X-Real-Ip, X-Forwarded-Proto,
//     -Port, -Host and -Server;
//   - ForwardAuth copies every request header, drops the hop-by-hop ones
//     (Connection, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade),
//     deletes the X-Forwarded-* family again (trustForwardHeader: false),
//     sends an empty User-Agent if the client sent none, and sets
//     X-Forwarded-For (the client's address), -Method, -Proto, -Port,
//     -Host and -Uri (the request URI); the request is a GET to the
//     address, without a body;
//   - an answer outside 2xx goes back to the client with its status, body
//     and headers (hop-by-hop ones dropped); on a 2xx, the
//     authResponseHeaders are copied onto the request to the app.
func traefikAuthRequest(t *testing.T, client *http.Request, remoteAddr, address string) *http.Request {
	t.Helper()
	managed := []string{"X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Port", "X-Forwarded-Server", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Forwarded-Prefix",
		"X-Forwarded-Tls-Client-Cert", "X-Forwarded-Tls-Client-Cert-Info", "X-Scheme", "X-Real-Ip"}
	deleteManaged := func(h http.Header) {
		for k := range h {
			for _, m := range managed {
				if http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-")) == m {
					delete(h, k)
				}
			}
		}
	}
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		t.Fatal(err)
	}
	port := "80"
	if _, p, err := net.SplitHostPort(client.Host); err == nil {
		port = p
	}
	// The entry point.
	h := client.Header.Clone()
	deleteManaged(h)
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	h.Del("Connection")
	h.Set("X-Real-Ip", ip)
	h.Set("X-Forwarded-Proto", "http")
	h.Set("X-Forwarded-Port", port)
	h.Set("X-Forwarded-Host", client.Host)
	h.Set("X-Forwarded-Server", "traefik-host")

	// The middleware.
	fwd, err := http.NewRequest(http.MethodGet, address, nil)
	if err != nil {
		t.Fatal(err)
	}
	fwd.Header = h.Clone()
	for _, hop := range []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		fwd.Header.Del(hop)
	}
	deleteManaged(fwd.Header)
	if _, ok := client.Header["User-Agent"]; !ok {
		fwd.Header.Set("User-Agent", "")
	}
	fwd.Header.Set("X-Forwarded-For", ip)
	fwd.Header.Set("X-Forwarded-Method", client.Method)
	fwd.Header.Set("X-Forwarded-Proto", "http")
	fwd.Header.Set("X-Forwarded-Port", port)
	fwd.Header.Set("X-Forwarded-Host", client.Host)
	fwd.Header.Set("X-Forwarded-Uri", client.URL.RequestURI())
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
	traefik := client("127.0.0.1") // Traefik's connections to Sluice

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
		return send(t, traefik, "GET", "", nil, traefikAuthRequest(t, req, remoteAddr, address))
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
