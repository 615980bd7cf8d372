package gatewaytest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/daemon"
	"github.com/sluicehq/sluice/internal/redistest"
)

// startTimeout bounds how long a gateway or daemon may take to be ready;
// it only turns a hang into a failure, it is not a measurement.
const startTimeout = 20 * time.Second

const installHint = "run `make test` (it installs them via scripts/ensure-gateways.sh) or `apt-get install -y nginx caddy`"

// example reads a file of examples/gateways.
func example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "gateways", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replace replaces each old with its new in s, failing the test if an old
// is not there: the examples must keep the addresses the tests rewrite.
func replace(t *testing.T, s string, oldnew ...string) string {
	t.Helper()
	for i := 0; i < len(oldnew); i += 2 {
		if !strings.Contains(s, oldnew[i]) {
			t.Fatalf("the example has no %q to replace", oldnew[i])
		}
		s = strings.ReplaceAll(s, oldnew[i], oldnew[i+1])
	}
	return s
}

// onFreePort calls start with loopback ports that were free a moment
// before, until it gets a gateway (start returns nil when the port was
// taken meanwhile), a few times at most.
func onFreePort(t *testing.T, start func(port int) *gateway) *gateway {
	t.Helper()
	for range 5 {
		if g := start(freePort(t)); g != nil {
			return g
		}
	}
	t.Fatal("no free port held long enough for the gateway to bind it, 5 times over")
	return nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// app is the upstream behind the gateways: it answers 200 "app" and
// counts the requests that reach it.
type app struct {
	*httptest.Server
	hits      atomic.Int64
	bodyBytes atomic.Int64                // of the last request
	target    atomic.Pointer[string]      // the request target of the last request, as received
	header    atomic.Pointer[http.Header] // the headers of the last request
}

func startApp(t *testing.T) *app {
	a := &app{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		a.bodyBytes.Store(n)
		a.target.Store(&r.RequestURI)
		a.header.Store(&r.Header)
		a.hits.Add(1)
		io.WriteString(w, "app\n")
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *app) addr() string { return a.Listener.Addr().String() }

// sluiced is a Sluice daemon run in this process on a config file.
type sluiced struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	logs   *redistest.SyncBuffer
}

// startSluice runs a daemon on yaml (an example's sluice.yaml, rewritten),
// its decision API on a free port. With redisAddr, the store is that
// Redis.
func startSluice(t *testing.T, yaml string) *sluiced {
	t.Helper()
	return startSluiceOn(t, yaml, "127.0.0.1:0")
}

// startSluiceOn is startSluice with the decision API on listen.
func startSluiceOn(t *testing.T, yaml, listen string) *sluiced {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	cfg.Listen = listen
	s := &sluiced{done: make(chan error, 1), logs: new(redistest.SyncBuffer)}
	d, err := daemon.New(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(s.logs, nil))})
	if err != nil {
		t.Fatalf("daemon.New: %v", err)
	}
	s.addr = d.Addrs().API
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("sluice logs:\n%s", s.logs.String())
		}
	})
	return s
}

// stop shuts the daemon down and waits until it has: its port refuses
// connections from then on.
func (s *sluiced) stop(t *testing.T) {
	s.once.Do(func() {
		s.cancel()
		if err := <-s.done; err != nil {
			t.Errorf("sluice Run: %v", err)
		}
	})
}

// gateway is a running nginx or caddy process.
type gateway struct {
	name string
	url  string // http://127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
	logs *redistest.SyncBuffer
	dir  string
}

// startNginx runs nginx on the http-block snippet conf (an example's
// sluice.conf, rewritten to listen on port), as a foreground process with
// its pid file, logs and temporary files in a test directory. It returns
// nil if port was taken before nginx could bind it.
func startNginx(t *testing.T, conf string, port int) *gateway {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Fatalf("nginx not found on PATH: %s", installHint)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sluice.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	user := ""
	if os.Geteuid() == 0 {
		// Workers would otherwise run as nobody, who cannot enter the
		// test's 0700 temporary directory.
		user = "user root;\n"
	}
	main := user + `worker_processes 1;
pid ` + filepath.Join(dir, "nginx.pid") + `;
error_log ` + filepath.Join(dir, "error.log") + ` warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path ` + filepath.Join(dir, "client_body") + `;
    proxy_temp_path ` + filepath.Join(dir, "proxy") + `;
    fastcgi_temp_path ` + filepath.Join(dir, "fastcgi") + `;
    uwsgi_temp_path ` + filepath.Join(dir, "uwsgi") + `;
    scgi_temp_path ` + filepath.Join(dir, "scgi") + `;
    include ` + filepath.Join(dir, "sluice.conf") + `;
}
`
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-g", "daemon off;")
	g := &gateway{name: "nginx", dir: dir}
	// nginx writes its pid file once it has bound its listeners.
	started := func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "nginx.pid"))
		return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(cmd.Process.Pid)
	}
	if !g.start(t, cmd, port, started, func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return string(b)
	}) {
		return nil
	}
	return g
}

// startCaddy runs caddy on the Caddyfile caddyfile (rewritten to listen
// on port), with the admin API off and its data in a test directory. It
// returns nil if port was taken before caddy could bind it.
func startCaddy(t *testing.T, caddyfile string, port int) *gateway {
	t.Helper()
	bin, err := exec.LookPath("caddy")
	if err != nil {
		t.Fatalf("caddy not found on PATH: %s", installHint)
	}
	dir := t.TempDir()
	global := "{\n\tadmin off\n\tauto_https off\n}\n\n"
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(global+caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	g := &gateway{name: "caddy", dir: dir}
	started := func() bool { return strings.Contains(g.logs.String(), "serving initial configuration") }
	if !g.start(t, cmd, port, started, nil) {
		return nil
	}
	return g
}

// start runs cmd and waits until port accepts connections, failing the
// test if the process exits first, except when it could not bind port:
// then it returns false, and the caller tries another port (a port found
// free can be taken by another process before the gateway binds it).
//
// Something accepting connections on port is not enough: whoever took the
// port would pass. started must also report that the gateway itself is
// serving (its pid file written, its "serving" log line).
func (g *gateway) start(t *testing.T, cmd *exec.Cmd, port int, started func() bool, errorLog func() string) bool {
	t.Helper()
	g.logs = new(redistest.SyncBuffer)
	cmd.Stdout, cmd.Stderr = g.logs, g.logs
	cmd.Dir = g.dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v (%s)", g.name, err, installHint)
	}
	g.cmd, g.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(g.done) }()
	logs := func() string {
		s := g.logs.String()
		if errorLog != nil {
			s += errorLog()
		}
		return s
	}
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			t.Logf("%s logs:\n%s", g.name, logs())
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	g.url = "http://" + addr
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-g.done:
			if strings.Contains(strings.ToLower(logs()), "address already in use") {
				t.Logf("%s: port %d taken meanwhile; trying another", g.name, port)
				return false
			}
			t.Fatalf("%s exited before listening on %s:\n%s", g.name, addr, logs())
		default:
		}
		if started() {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
				return true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s after %v:\n%s", g.name, addr, startTimeout, logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the process by its PID (SIGTERM: nginx and caddy exit at once)
// and waits for it.
func (g *gateway) stop() {
	select {
	case <-g.done:
		return
	default:
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(startTimeout):
		g.cmd.Process.Kill()
		<-g.done
	}
}

// client sends requests from a given loopback source address (127.0.0.1,
// 127.0.0.2, ...: all of 127/8 is local on Linux), without keep-alive so
// that each request is a fresh connection.
func client(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// result is what a client got.
type result struct {
	status int
	header http.Header
	body   string
}

// sendBody sends a POST of body to url, with the headers kv (name, value,
// name, value…).
func sendBody(t *testing.T, c *http.Client, url string, body []byte, kv ...string) result {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	return send(t, c, "", "", nil, req)
}

// send sends method url with the headers hdr, or req when it is given.
func send(t *testing.T, c *http.Client, method, url string, hdr map[string]string, req ...*http.Request) result {
	t.Helper()
	var r *http.Request
	if len(req) > 0 {
		r = req[0]
	} else {
		var err error
		if r, err = http.NewRequest(method, url, nil); err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
	}
	method, url = r.Method, r.URL.String()
	resp, err := c.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, url, err)
	}
	return result{resp.StatusCode, resp.Header, string(b)}
}

// sendRawKeep sends request to addr and reads the answer, leaving the
// connection open until the test ends.
func sendRawKeep(t *testing.T, addr, request string) result {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return roundTrip(t, c, request)
}

// sendRaw sends one request, written out as it goes on the wire (for
// request targets Go's client would not send as they are: a fragment,
// say), from the loopback address src to addr, and reads the answer.
func sendRaw(t *testing.T, src, addr, request string) result {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return roundTrip(t, c, request)
}

// roundTrip writes request on c and reads one answer.
func roundTrip(t *testing.T, c net.Conn, request string) result {
	t.Helper()
	// Only turns a hang into a failure.
	c.SetDeadline(time.Now().Add(startTimeout))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatalf("%.40q: %v", request, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%.40q: %v", request, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%.40q: body: %v", request, err)
	}
	return result{resp.StatusCode, resp.Header, string(b)}
}

func (r result) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %q", r.status, r.body)
	for _, k := range []string{"Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Retry-After", "Ratelimit-Policy", "Ratelimit"} {
		if v := r.header.Values(k); len(v) > 0 {
			fmt.Fprintf(&b, " %s=%q", k, v)
		}
	}
	return b.String()
}
