package gatewaytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The example Sluice configs, rewritten for tests: the per-client limit
// down to 3 and the login limit down to 1, per hour, so that no refill
// happens while a test runs.
func sluiceYAML(t *testing.T, name, redisAddr string) string {
	t.Helper()
	y := replace(t, example(t, name), "rate: 100/m", "rate: 3/h", "rate: 5/m", "rate: 1/h")
	if redisAddr != "" {
		// A generous timeout, and failing closed: on this shared machine
		// a 50ms Redis call can time out, and failing open would pass a
		// request without counting it.
		y = replace(t, y,
			"  type: memory\n", "  type: redis\n  redis:\n    addrs: ["+redisAddr+"]\n    timeout: 5s\n",
			"  on_error: allow\n", "  on_error: deny\n")
	}
	return y
}

// kind is one gateway and its example configs.
type kind struct {
	name   string
	sluice string // the example Sluice config
	// start runs the gateway in front of app, asking the Sluice at
	// sluiceAddr, with the config's variant v.
	start func(t *testing.T, sluiceAddr, appAddr string, v variant) *gateway
	// lbInSluice says whether, behind a load balancer, the example's
	// Sluice config must list the balancer in trusted_proxies.
	lbInSluice bool
	// down is the status a client gets when Sluice is down and the
	// gateway fails closed; canFailOpen says whether the example config
	// has a fail-open variant.
	down        int
	canFailOpen bool
	// stuck is the status a client gets, once the gateway's timeout has
	// passed, when Sluice takes the connection but never answers and the
	// gateway fails closed.
	stuck int
}

var kinds = []kind{
	{
		name:   "nginx",
		sluice: "nginx/sluice.yaml",
		start: func(t *testing.T, sluiceAddr, appAddr string, v variant) *gateway {
			return onFreePort(t, func(port int) *gateway {
				conf := replace(t, example(t, "nginx/sluice.conf"),
					"server 127.0.0.1:8080;", "server "+sluiceAddr+";",
					"server 127.0.0.1:9000;", "server "+appAddr+";",
					"listen 8000;", "listen 127.0.0.1:"+strconv.Itoa(port)+";")
				if v.failOpen {
					conf = replace(t, conf, "error_page 500 = @sluice_unavailable;", "error_page 500 = @unlimited;")
				}
				if v.tlsCA != "" {
					// nginx checks DNS names only: Sluice's certificate
					// names localhost.
					conf = replace(t, conf, "proxy_pass http://sluice/v1/forward-auth;\n",
						"proxy_pass https://sluice/v1/forward-auth;\n        proxy_ssl_verify on;\n"+
							"        proxy_ssl_trusted_certificate "+v.tlsCA+";\n        proxy_ssl_name localhost;\n")
				}
				if v.lb != "" {
					conf = replace(t, conf,
						"    #set_real_ip_from 10.0.0.0/8;\n", "    set_real_ip_from "+v.lb+";\n",
						"    #real_ip_header", "    real_ip_header",
						"    #real_ip_recursive", "    real_ip_recursive")
				}
				return startNginx(t, conf, port)
			})
		},
		down:        http.StatusServiceUnavailable,
		canFailOpen: true,
		stuck:       http.StatusServiceUnavailable,
	},
	{
		name:   "caddy",
		sluice: "caddy/sluice.yaml",
		start: func(t *testing.T, sluiceAddr, appAddr string, v variant) *gateway {
			return onFreePort(t, func(port int) *gateway {
				conf := replace(t, example(t, "caddy/Caddyfile"),
					"reverse_proxy 127.0.0.1:8080", "reverse_proxy "+sluiceAddr,
					`hostport} == "127.0.0.1:8080"`, `hostport} == "`+sluiceAddr+`"`,
					"reverse_proxy 127.0.0.1:9000", "reverse_proxy "+appAddr,
					"http://:8000 {\n", caddySite(port))
				if v.lb != "" {
					conf = replace(t, conf, "\t\t#trusted_proxies 10.0.0.0/8\n", "\t\ttrusted_proxies "+v.lb+"\n")
				}
				if v.tlsCA != "" {
					conf = replace(t, conf, "\t\ttransport http {\n",
						"\t\ttransport http {\n\t\t\ttls\n\t\t\ttls_trusted_ca_certs "+v.tlsCA+"\n\t\t\ttls_server_name localhost\n")
				}
				if v.failOpen {
					conf = replace(t, conf,
						"\t#handle_errors {\n", "\thandle_errors {\n",
						"\t#\t@sluice_down", "\t\t@sluice_down",
						"\t#\treverse_proxy @sluice_down 127.0.0.1:9000\n", "\t\treverse_proxy @sluice_down "+appAddr+"\n",
						"\t#}\n", "\t}\n")
				}
				return startCaddy(t, conf, port)
			})
		},
		down:        http.StatusBadGateway,
		canFailOpen: true,
		lbInSluice:  true,
		stuck:       http.StatusGatewayTimeout,
	},
}

// variant is a variant of an example config, as its comments describe it.
type variant struct {
	failOpen bool   // let requests through when Sluice is down
	lb       string // the prefix of a load balancer in front of the gateway, if any
	// tlsCA, if set, is the CA file of Sluice's certificate (for
	// localhost): the gateway asks Sluice over TLS (api.tls), trusting it.
	tlsCA string
}

// caddySite is the example's site address for port: any host, as in the
// example (an address with a host would answer other hosts with an empty
// 200), bound to loopback only.
func caddySite(port int) string {
	return "http://:" + strconv.Itoa(port) + " {\n\tbind 127.0.0.1\n"
}

// wantAllowed checks an allowed answer that reached the app, with the
// per-client rule's headers showing remaining.
func wantAllowed(t *testing.T, what string, r result, remaining int) {
	t.Helper()
	if r.status != http.StatusOK || r.body != "app\n" {
		t.Fatalf("%s: got %v, want 200 from the app", what, r)
	}
	if got := r.header.Get("X-RateLimit-Limit"); got != "3" {
		t.Errorf("%s: X-RateLimit-Limit = %q, want 3 (%v)", what, got, r)
	}
	if got := r.header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(remaining) {
		t.Errorf("%s: X-RateLimit-Remaining = %q, want %d (%v)", what, got, remaining, r)
	}
	if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`"per-client";r=%d;t=`, remaining)) {
		t.Errorf("%s: RateLimit = %q, want \"per-client\";r=%d;t=… (%v)", what, got, remaining, r)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"per-client";q=3;w=3600` {
		t.Errorf("%s: RateLimit-Policy = %q, want \"per-client\";q=3;w=3600", what, got)
	}
	if r.header.Get("Retry-After") != "" {
		t.Errorf("%s: an allowed answer has Retry-After (%v)", what, r)
	}
}

// wantLimited checks a 429 answer with Retry-After and the headers of the
// rule named rule.
func wantLimited(t *testing.T, what string, r result, rule string) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("%s: got %v, want 429", what, r)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Errorf("%s: Retry-After = %q, want whole seconds >= 1 (%v)", what, r.header.Get("Retry-After"), r)
	}
	// Sluice's body, {"error":"rate_limited","rule":NAME,"retry_after_ms":N},
	// with N what Retry-After rounds up (nginx rebuilds it from Sluice's
	// X-RateLimit-Retry-After-Ms; TestGatewayRetryAfterMillis checks N to
	// the millisecond).
	var body struct {
		Error        string `json:"error"`
		Rule         string `json:"rule"`
		RetryAfterMS *int64 `json:"retry_after_ms"`
	}
	dec := json.NewDecoder(strings.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Error != "rate_limited" || body.Rule != rule || body.RetryAfterMS == nil ||
		*body.RetryAfterMS <= int64(ra-1)*1000 || *body.RetryAfterMS > int64(ra)*1000 {
		t.Errorf("%s: body %q (%v), want {\"error\":\"rate_limited\",\"rule\":%q,\"retry_after_ms\":N} with N in Retry-After's second", what, r.body, err, rule)
	}
	if got := r.header.Get("X-RateLimit-Retry-After"); got != r.header.Get("Retry-After") {
		t.Errorf("%s: X-RateLimit-Retry-After = %q, want Retry-After's %q", what, got, r.header.Get("Retry-After"))
	}
	if got := r.header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("%s: X-RateLimit-Remaining = %q, want 0 (%v)", what, got, r)
	}
	if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, `"`+rule+`";r=0;t=`) {
		t.Errorf("%s: RateLimit = %q, want \"%s\";r=0;t=… (%v)", what, got, rule, r)
	}
	if r.header.Get("X-RateLimit-Limit") == "" || r.header.Get("X-RateLimit-Reset") == "" || r.header.Get("RateLimit-Policy") == "" {
		t.Errorf("%s: rate-limit headers missing: %v", what, r)
	}
}

// wantPerClientLimit sends the example's per-client limit, 3 a window,
// through g from 127.0.0.1: exactly 3 pass and reach the app, then 429
// with Retry-After and the headers. It returns that client.
func wantPerClientLimit(t *testing.T, g *gateway, a *app) *http.Client {
	t.Helper()
	c := client("127.0.0.1")
	for i := range 3 {
		wantAllowed(t, fmt.Sprintf("request %d", i+1), send(t, c, "GET", g.url+"/items?page=1", nil), 2-i)
	}
	wantLimited(t, "request 4", send(t, c, "GET", g.url+"/items?page=1", nil), "per-client")
	if got := a.hits.Load(); got != 3 {
		t.Errorf("the app saw %d requests, want 3", got)
	}
	return c
}

// Exactly the limit passes, then 429 with Retry-After and the headers;
// only the allowed requests reach the app.
func TestGatewayLimits(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{})
			wantPerClientLimit(t, g, a)
			// A request body reaches the app whole (Sluice is asked
			// without it), past the gateways' in-memory buffers.
			body := bytes.Repeat([]byte("0123456789abcdef"), 200<<10/16)
			wantAllowed(t, "a 200 KiB POST from another client", sendBody(t, client("127.0.0.5"), g.url+"/upload", body), 2)
			if got := a.bodyBytes.Load(); got != int64(len(body)) {
				t.Errorf("the app got %d bytes of the %d-byte body", got, len(body))
			}
			if got := a.hits.Load(); got != 4 {
				t.Errorf("the app saw %d requests, want 4", got)
			}
		})
	}
}

// A client's own X-Forwarded-For, X-Forwarded-Uri and X-Forwarded-Method
// (or X-Original-URI) change neither its key nor the rules that apply.
func TestGatewayIgnoresSpoofedHeaders(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{})

			// Client 127.0.0.2 claims to be someone new each time.
			c2 := client("127.0.0.2")
			for i := range 3 {
				r := send(t, c2, "GET", g.url+"/", map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i+1)})
				wantAllowed(t, fmt.Sprintf("127.0.0.2 request %d", i+1), r, 2-i)
			}
			wantLimited(t, "127.0.0.2 request 4 as 203.0.113.9", send(t, c2, "GET", g.url+"/", map[string]string{"X-Forwarded-For": "203.0.113.9"}), "per-client")
			// Nor can it borrow another client's count: 127.0.0.3 has its own.
			wantAllowed(t, "127.0.0.3 request 1", send(t, client("127.0.0.3"), "GET", g.url+"/", map[string]string{"X-Forwarded-For": "127.0.0.2"}), 2)

			// Client 127.0.0.4 logs in once (1/h), then tries to pass its
			// second login off as another method and path.
			c4 := client("127.0.0.4")
			if r := send(t, c4, "POST", g.url+"/login", nil); r.status != http.StatusOK {
				t.Fatalf("first login: got %v, want 200", r)
			}
			spoof := map[string]string{
				"X-Forwarded-Uri":    "/elsewhere",
				"X-Forwarded-Method": "GET",
				"X-Original-URI":     "/elsewhere",
				"X-Original-Method":  "GET",
			}
			wantLimited(t, "second login, disguised", send(t, c4, "POST", g.url+"/login", spoof), "login")
			if got := a.hits.Load(); got != 5 {
				t.Errorf("the app saw %d requests, want 5", got)
			}
		})
	}
}

// Two gateway instances asking one Sluice share the count; so do two
// gateways asking two Sluices on one Redis.
func TestGatewaysShareTheCount(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name+"/one Sluice", func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g1 := k.start(t, s.addr, a.addr(), variant{})
			g2 := k.start(t, s.addr, a.addr(), variant{})
			shareCount(t, a, g1, g2)
		})
		t.Run(k.name+"/two Sluices, one Redis", func(t *testing.T) {
			rd := redistest.StartServer(t)
			a := startApp(t)
			s1 := startSluice(t, sluiceYAML(t, k.sluice, rd.Addr))
			s2 := startSluice(t, sluiceYAML(t, k.sluice, rd.Addr))
			g1 := k.start(t, s1.addr, a.addr(), variant{})
			g2 := k.start(t, s2.addr, a.addr(), variant{})
			shareCount(t, a, g1, g2)
		})
	}
}

func shareCount(t *testing.T, a *app, g1, g2 *gateway) {
	t.Helper()
	c := client("127.0.0.1")
	wantAllowed(t, "request 1 via gateway 1", send(t, c, "GET", g1.url+"/", nil), 2)
	wantAllowed(t, "request 2 via gateway 2", send(t, c, "GET", g2.url+"/", nil), 1)
	wantAllowed(t, "request 3 via gateway 1", send(t, c, "GET", g1.url+"/", nil), 0)
	wantLimited(t, "request 4 via gateway 2", send(t, c, "GET", g2.url+"/", nil), "per-client")
	wantLimited(t, "request 5 via gateway 1", send(t, c, "GET", g1.url+"/", nil), "per-client")
	if got := a.hits.Load(); got != 3 {
		t.Errorf("the app saw %d requests, want 3", got)
	}

	// Another client's requests at once, through both gateways: exactly
	// the limit passes.
	const n = 16
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		g := []*gateway{g1, g2}[i%2]
		wg.Go(func() {
			resp, err := client("127.0.0.50").Get(g.url + "/")
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	count := map[int]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d at once: %v", i+1, errs[i])
		}
		count[statuses[i]]++
	}
	if count[http.StatusOK] != 3 || count[http.StatusTooManyRequests] != n-3 {
		t.Errorf("%d requests at once through both gateways: statuses %v, want 3 × 200 and %d × 429", n, count, n-3)
	}
	if got := a.hits.Load(); got != 6 {
		t.Errorf("the app saw %d requests, want 6", got)
	}
}

// With Sluice down, the gateway fails closed, or open where its config
// says so.
func TestGatewayWithSluiceDown(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name+"/closed", func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{})
			c := client("127.0.0.1")
			wantAllowed(t, "with Sluice up", send(t, c, "GET", g.url+"/", nil), 2)
			s.stop(t)
			if r := send(t, c, "GET", g.url+"/", nil); r.status != k.down {
				t.Errorf("with Sluice down: got %v, want %d", r, k.down)
			}
			if got := a.hits.Load(); got != 1 {
				t.Errorf("the app saw %d requests, want 1 (none with Sluice down)", got)
			}
		})
		if !k.canFailOpen {
			continue
		}
		t.Run(k.name+"/open", func(t *testing.T) {
			a := startApp(t)
			s := startSluice(t, sluiceYAML(t, k.sluice, ""))
			g := k.start(t, s.addr, a.addr(), variant{failOpen: true})
			c := client("127.0.0.1")
			wantAllowed(t, "with Sluice up", send(t, c, "GET", g.url+"/", nil), 2)
			s.stop(t)
			for i := range 5 {
				r := send(t, c, "GET", g.url+"/", nil)
				if r.status != http.StatusOK || r.body != "app\n" {
					t.Fatalf("with Sluice down, request %d: got %v, want 200 from the app", i+1, r)
				}
				if r.header.Get("X-RateLimit-Remaining") != "" {
					t.Errorf("with Sluice down: rate-limit headers %v", r)
				}
			}
			if got := a.hits.Load(); got != 6 {
				t.Errorf("the app saw %d requests, want 6", got)
			}
		})
	}
}

// A port taken between finding it free and the gateway binding it is
// reported as such (the harness then tries another), not as a failure.
func TestGatewayOnATakenPort(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			var g *gateway
			switch k.name {
			case "nginx":
				g = startNginx(t, replace(t, example(t, "nginx/sluice.conf"), "listen 8000;", "listen 127.0.0.1:"+strconv.Itoa(port)+";"), port)
			case "caddy":
				g = startCaddy(t, replace(t, example(t, "caddy/Caddyfile"), "http://:8000 {\n", caddySite(port)), port)
			}
			if g != nil {
				t.Errorf("%s started on a port another process holds", k.name)
			}
		})
	}
}
