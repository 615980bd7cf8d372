//go:build traefik

package gatewaytest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The examples/gateways/traefik configs with a real Traefik, the binary
// $TRAEFIK names: `TRAEFIK=/path/to/traefik make check-traefik`. Traefik
// is not in Debian's packages, so these tests are not part of `make test`
// (the build tag traefik keeps them out); traefik_test.go's emulation of
// ForwardAuth is, and every request here is also played through that
// emulation, against a second Sluice, and what reached the two Sluices
// compared header by header, so that the emulation cannot drift from the
// real Traefik unnoticed.

// tap relays TCP connections to a Sluice and keeps the head of every
// request passing through, parsed from the bytes as they went on the
// wire: what the gateway really sent.
type tap struct {
	addr string
	reqs chan *http.Request
	ln   net.Listener
	mu   sync.Mutex
	open []net.Conn
	// stalled: connections are taken and never answered, as by a
	// Sluice that hangs.
	stalled atomic.Bool
}

func startTap(t *testing.T, target string) *tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{addr: ln.Addr().String(), reqs: make(chan *http.Request, 1024), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tp.stalled.Load() {
				tp.mu.Lock()
				tp.open = append(tp.open, c)
				tp.mu.Unlock()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close() // as if Sluice had refused it
				continue
			}
			tp.mu.Lock()
			tp.open = append(tp.open, c, up)
			tp.mu.Unlock()
			go func() { io.Copy(c, up); c.Close() }()
			pr, pw := io.Pipe()
			go func() {
				io.Copy(up, io.TeeReader(c, pw))
				pw.Close()
				up.Close()
			}()
			go func() {
				br := bufio.NewReader(pr)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						io.Copy(io.Discard, pr)
						return
					}
					io.Copy(io.Discard, r.Body)
					tp.reqs <- r
				}
			}()
		}
	}()
	t.Cleanup(tp.close)
	return tp
}

// close stops taking connections and closes those open: from then on
// the tap's port refuses connections, as a Sluice that is down.
func (tp *tap) close() {
	tp.ln.Close()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for _, c := range tp.open {
		c.Close()
	}
	tp.open = nil
}

// stall makes the tap a Sluice that hangs: the connections open are
// closed (Traefik's client opens another for its next request), and those
// taken from then on are never answered.
func (tp *tap) stall() {
	tp.stalled.Store(true)
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for _, c := range tp.open {
		c.Close()
	}
	tp.open = nil
}

// take returns the request that carried X-Check: id, skipping others
// (the probes that waited for Traefik to load its config).
func (tp *tap) take(t *testing.T, id string) *http.Request {
	t.Helper()
	timeout := time.After(startTimeout) // only turns a hang into a failure
	for {
		select {
		case r := <-tp.reqs:
			if r.Header.Get("X-Check") == id {
				return r
			}
		case <-timeout:
			t.Fatalf("no request with X-Check: %s reached Sluice", id)
		}
	}
}

// wire is a client's request, written as it goes on the wire, so that
// the real Traefik and the emulation parse the same bytes.
type wire struct {
	method, target string
	hdr            [][2]string // in order; a "Connection" line is added to close
	body           string
}

func (w wire) raw(host string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", w.method, w.target, host)
	conn := "close"
	for _, kv := range w.hdr {
		if strings.EqualFold(kv[0], "Connection") {
			conn += ", " + kv[1]
			continue
		}
		fmt.Fprintf(&b, "%s: %s\r\n", kv[0], kv[1])
	}
	fmt.Fprintf(&b, "Connection: %s\r\n", conn)
	if w.body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(w.body))
	}
	return b.String() + "\r\n" + w.body
}

// realTraefik is a Traefik on the example configs, asking a Sluice
// through a tap, beside the emulation asking a second Sluice on the same
// config through a second tap.
type realTraefik struct {
	g       *gateway
	addr    string // host:port of its entry point
	app     *app
	sluice  *sluiced
	tap     *tap
	tr      traefik // the emulation of this configuration
	emuTap  *tap
	emuConn *http.Client // the emulation's connections to its Sluice
	n       int
}

// traefikSetup is a variant of the example configs.
type traefikSetup struct {
	lb                 string // the load balancer's address, listed in the entry point's forwardedHeaders.trustedIPs
	trustForwardHeader bool
	sluiceYAML         string // the Sluice config, rewritten
}

func startRealTraefik(t *testing.T, st traefikSetup) *realTraefik {
	t.Helper()
	bin := os.Getenv("TRAEFIK")
	if bin == "" {
		t.Fatal("TRAEFIK is not set: run TRAEFIK=/path/to/traefik make check-traefik")
	}
	if st.sluiceYAML == "" {
		st.sluiceYAML = sluiceYAML(t, "traefik/sluice.yaml", "")
	}
	rt := &realTraefik{app: startApp(t), tr: traefik{trustedPeer: st.lb != "", trustForwardHeader: st.trustForwardHeader}}
	rt.sluice = startSluice(t, st.sluiceYAML)
	rt.tap = startTap(t, rt.sluice.addr)
	rt.emuTap = startTap(t, startSluice(t, st.sluiceYAML).addr)
	tr := http.DefaultTransport.(*http.Transport).Clone() // ForwardAuth's own client
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext
	rt.emuConn = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(tr.CloseIdleConnections)
	authAddr := rt.tap.addr

	rt.g = onFreePort(t, func(port int) *gateway {
		dir := t.TempDir()
		ep := `    address: "127.0.0.1:` + strconv.Itoa(port) + `"` + "\n"
		if st.lb != "" {
			ep += "    forwardedHeaders:\n      trustedIPs: [" + st.lb + "/32]\n"
		}
		static := replace(t, example(t, "traefik/traefik.yml"), `    address: ":8000"`+"\n", ep) +
			// No calls home from a test; the debug log shows up when it fails.
			"\nglobal:\n  checkNewVersion: false\n  sendAnonymousUsage: false\nlog:\n  level: DEBUG\n"
		dynamic := replace(t, example(t, "traefik/dynamic.yml"),
			`address: "http://127.0.0.1:8080/v1/forward-auth"`, `address: "http://`+authAddr+`/v1/forward-auth"`,
			`url: "http://127.0.0.1:9000"`, `url: "`+rt.app.URL+`"`)
		if st.trustForwardHeader {
			dynamic = replace(t, dynamic, "trustForwardHeader: false", "trustForwardHeader: true")
		}
		for name, s := range map[string]string{"traefik.yml": static, "dynamic.yml": dynamic} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		g := &gateway{name: "traefik", dir: dir}
		cmd := exec.Command(bin, "--configFile="+filepath.Join(dir, "traefik.yml"))
		if !g.start(t, cmd, port, func() bool { return true }, nil) {
			return nil
		}
		return g
	})
	rt.addr = strings.TrimPrefix(rt.g.url, "http://")

	// The entry point listens before the file provider's routers are
	// in: until then Traefik answers 404. Probe from an address of its
	// own (the probes count against it) until the router answers.
	deadline := time.Now().Add(startTimeout)
	for i := 0; ; i++ {
		w := wire{method: "GET", target: "/ready", hdr: [][2]string{{"X-Check", "ready-" + strconv.Itoa(i)}}}
		if r := sendRaw(t, "127.0.0.250", rt.addr, w.raw(rt.addr)); r.status != http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("traefik still answers 404 after %v: its router is not in\n%s", startTimeout, rt.g.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	rt.app.hits.Store(0) // the probe's
	return rt
}

// exchange is one client request through the real Traefik and through
// the emulation.
type exchange struct {
	real, emu     result        // what the client got; what the emulation's Sluice answered
	sent, emuSent *http.Request // what reached each Sluice
	appSaw        http.Header   // the app's request, when the real one reached it
}

// ask sends w from the loopback address src through the real Traefik, and
// the same request, as the emulation builds it for a client at src, to
// the second Sluice. It fails the test when what reached the two Sluices
// differs, header by header (but X-Check, which tells them apart), or
// when their answers do.
func (rt *realTraefik) ask(t *testing.T, src string, w wire) exchange {
	t.Helper()
	rt.n++
	id := strconv.Itoa(rt.n)
	w.hdr = append([][2]string{{"X-Check", "real-" + id}}, w.hdr...)
	var x exchange
	hits := rt.app.hits.Load()
	x.real = sendRaw(t, src, rt.addr, w.raw(rt.addr))
	x.sent = rt.tap.take(t, "real-"+id)
	if rt.app.hits.Load() > hits {
		x.appSaw = *rt.app.header.Load()
	}

	w.hdr[0][1] = "emu-" + id
	client, err := http.ReadRequest(bufio.NewReader(strings.NewReader(w.raw(rt.addr))))
	if err != nil {
		t.Fatal(err)
	}
	x.emu = send(t, rt.emuConn, "", "", nil, rt.tr.authRequest(t, client, src+":50000", "http://"+rt.emuTap.addr+"/v1/forward-auth"))
	x.emuSent = rt.emuTap.take(t, "emu-"+id)

	what := fmt.Sprintf("%s %s from %s", w.method, w.target, src)
	if d := headDiff(x.sent, x.emuSent); d != "" {
		t.Errorf("%s: what the emulation sends Sluice differs from what Traefik sent:\n%s", what, d)
	}
	switch emuOK := x.emu.status/100 == 2; {
	case emuOK && (x.real.status != http.StatusOK || x.real.body != "app\n"):
		t.Errorf("%s: Sluice allowed the emulated request (%v) but the client of the real Traefik got %v", what, x.emu, x.real)
	case !emuOK && (x.real.status != x.emu.status || retryMS.ReplaceAllString(x.real.body, "") != retryMS.ReplaceAllString(x.emu.body, "")):
		t.Errorf("%s: Sluice answered the emulated request %v, the real Traefik's client got %v", what, x.emu, x.real)
	}
	return x
}

// retryMS is the part of Sluice's 429 body that differs by the
// milliseconds between two requests.
var retryMS = regexp.MustCompile(`"retry_after_ms":[0-9]+`)

// headDiff lists, header by header, where two requests' heads differ.
func headDiff(real, emu *http.Request) string {
	var d []string
	for _, f := range [][3]string{
		{"method", real.Method, emu.Method},
		{"target", real.RequestURI, emu.RequestURI},
		{"proto", real.Proto, emu.Proto},
	} {
		if f[1] != f[2] {
			d = append(d, fmt.Sprintf("  %s: Traefik %q, emulation %q", f[0], f[1], f[2]))
		}
	}
	// Host names each tap's own port.
	names := map[string]bool{}
	for k := range real.Header {
		names[k] = true
	}
	for k := range emu.Header {
		names[k] = true
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range names {
			if !yield(k) {
				return
			}
		}
	}) {
		if k == "X-Check" {
			continue
		}
		rv, ev := real.Header[k], emu.Header[k]
		if !slices.Equal(rv, ev) {
			d = append(d, fmt.Sprintf("  %s: Traefik %q, emulation %q", k, rv, ev))
		}
	}
	return strings.Join(d, "\n")
}

// head prints a request head as Sluice got it, for the test's log.
func head(r *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\n", r.Method, r.RequestURI, r.Proto)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.Header {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		for _, v := range r.Header[k] {
			fmt.Fprintf(&b, "  %s: %s\n", k, v)
		}
	}
	return b.String()
}
