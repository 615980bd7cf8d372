package gatewaytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The nginx example's Unix-socket variant: nginx asks Sluice over a Unix
// socket (upstream server unix:…; keepalive), Sluice trusting the
// socket's peer ("unix:"), so each client counts apart. Exactly the limit
// passes, then 429 with Retry-After and the headers, as over TCP.
func TestGatewayOverUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "sl") // short: a socket's path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	y := replace(t, sluiceYAML(t, "nginx/sluice.yaml", ""),
		"  trusted_proxies: [127.0.0.1/32]\n", "",
		`  #trusted_proxies: [127.0.0.1/32, "unix:"]`, `  trusted_proxies: [127.0.0.1/32, "unix:"]`,
		"#listen: unix:/run/sluice/api.sock", "listen: unix:"+sock,
		"listen: 127.0.0.1:8080\n", "")
	s := startSluiceOn(t, y, "unix:"+sock)
	if s.addr != "unix:"+sock {
		t.Fatalf("Sluice listens on %s, want unix:%s", s.addr, sock)
	}
	a := startApp(t)
	g := onFreePort(t, func(port int) *gateway {
		conf := replace(t, example(t, "nginx/sluice.conf"),
			"    server 127.0.0.1:8080;\n", "",
			"#server unix:/run/sluice/api.sock;", "server unix:"+sock+";",
			"server 127.0.0.1:9000;", "server "+a.addr()+";",
			"listen 8000;", "listen 127.0.0.1:"+strconv.Itoa(port)+";")
		return startNginx(t, conf, port)
	})
	c := client("127.0.0.1")
	for i := range 3 {
		wantAllowed(t, fmt.Sprintf("request %d", i+1), send(t, c, "GET", g.url+"/items?page=1", nil), 2-i)
	}
	wantLimited(t, "request 4", send(t, c, "GET", g.url+"/items?page=1", nil), "per-client")
	if got := a.hits.Load(); got != 3 {
		t.Errorf("the app saw %d requests, want 3", got)
	}
	// Another client counts apart: nginx's X-Forwarded-For is believed.
	wantAllowed(t, "another client", send(t, client("127.0.0.5"), "GET", g.url+"/items?page=1", nil), 2)
	if got := a.hits.Load(); got != 4 {
		t.Errorf("the app saw %d requests, want 4", got)
	}
}
