package gatewaytest

import (
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/socktest"
)

// The nginx example's Unix-socket variant: nginx asks Sluice over a Unix
// socket (upstream server unix:…; keepalive), Sluice trusting the
// socket's peer ("unix:"), so each client counts apart. Exactly the limit
// passes, then 429 with Retry-After and the headers, as over TCP.
func TestGatewayOverUnixSocket(t *testing.T) {
	sock, _ := startSluiceOnSocket(t, "nginx/sluice.yaml")
	a := startApp(t)
	g := onFreePort(t, func(port int) *gateway {
		conf := replace(t, example(t, "nginx/sluice.conf"),
			"    server 127.0.0.1:8080;\n", "",
			"#server unix:/run/sluice/api.sock;", "server unix:"+sock+";",
			"server 127.0.0.1:9000;", "server "+a.addr()+";",
			"listen 8000;", "listen 127.0.0.1:"+strconv.Itoa(port)+";")
		return startNginx(t, conf, port)
	})
	wantPerClientLimit(t, g, a)
	// Another client counts apart: nginx's X-Forwarded-For is believed.
	wantAllowed(t, "another client", send(t, client("127.0.0.5"), "GET", g.url+"/items?page=1", nil), 2)
	if got := a.hits.Load(); got != 4 {
		t.Errorf("the app saw %d requests, want 4", got)
	}
}

// The Caddy example's Unix-socket variant: Caddy asks Sluice over a Unix
// socket (reverse_proxy unix//PATH), Sluice trusting the socket's peer
// ("unix:") and so the X-Forwarded-For Caddy sets, so each client counts
// apart. Exactly the limit passes, then 429 with Retry-After and the
// headers, as over TCP. The fail-open handle_errors, uncommented with the
// socket's path as the upstream's hostport, lets requests through once
// Sluice is down.
func TestCaddyOverUnixSocket(t *testing.T) {
	sock, s := startSluiceOnSocket(t, "caddy/sluice.yaml")
	a := startApp(t)
	g := onFreePort(t, func(port int) *gateway {
		conf := replace(t, example(t, "caddy/Caddyfile"),
			"\treverse_proxy 127.0.0.1:8080 {\n", "",
			"\t#reverse_proxy unix//run/sluice/api.sock {", "\treverse_proxy unix/"+sock+" {",
			"reverse_proxy 127.0.0.1:9000", "reverse_proxy "+a.addr(),
			"\t#handle_errors {\n", "\thandle_errors {\n",
			"\t#\t@sluice_down", "\t\t@sluice_down",
			`hostport} == "127.0.0.1:8080"`, `hostport} == "`+sock+`"`,
			"\t#\treverse_proxy @sluice_down 127.0.0.1:9000\n", "\t\treverse_proxy @sluice_down "+a.addr()+"\n",
			"\t#}\n", "\t}\n",
			"http://:8000 {\n", caddySite(port))
		return startCaddy(t, conf, port)
	})
	c := wantPerClientLimit(t, g, a)
	// Another client counts apart: Caddy's X-Forwarded-For is believed.
	wantAllowed(t, "another client", send(t, client("127.0.0.5"), "GET", g.url+"/items?page=1", nil), 2)
	// A client's own X-Forwarded-For is not: Caddy replaces it.
	wantLimited(t, "the first client, claiming another's address",
		send(t, c, "GET", g.url+"/items?page=1", map[string]string{"X-Forwarded-For": "192.0.2.7"}), "per-client")
	if got := a.hits.Load(); got != 4 {
		t.Errorf("the app saw %d requests, want 4", got)
	}
	s.stop(t) // removes the socket: Caddy's dial fails (502)
	r := send(t, c, "GET", g.url+"/items?page=1", nil)
	if r.status != http.StatusOK || r.body != "app\n" || r.header.Get("X-RateLimit-Remaining") != "" {
		t.Errorf("with Sluice down, failing open: got %v, want 200 from the app without rate-limit headers", r)
	}
	if got := a.hits.Load(); got != 5 {
		t.Errorf("the app saw %d requests, want 5", got)
	}
}

// startSluiceOnSocket runs Sluice on the example config name's Unix-socket
// variant (its commented listen: unix:… and trusted_proxies with "unix:"),
// on a socket in a new directory. It returns the socket's path.
func startSluiceOnSocket(t *testing.T, name string) (string, *sluiced) {
	t.Helper()
	sock := filepath.Join(socktest.Dir(t), "api.sock")
	y := replace(t, sluiceYAML(t, name, ""),
		"  trusted_proxies: [127.0.0.1/32]\n", "",
		`  #trusted_proxies: [127.0.0.1/32, "unix:"]`, `  trusted_proxies: [127.0.0.1/32, "unix:"]`,
		"#listen: unix:/run/sluice/api.sock", "listen: unix:"+sock,
		"listen: 127.0.0.1:8080\n", "")
	s := startSluiceOn(t, y, "unix:"+sock)
	if s.addr != "unix:"+sock {
		t.Fatalf("Sluice listens on %s, want unix:%s", s.addr, sock)
	}
	return sock, s
}
