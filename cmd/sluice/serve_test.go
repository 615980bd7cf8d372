package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/rules"
)

var reAPI = regexp.MustCompile(`decision API on (http://\S+)`)

// runServe runs serve in the background and returns the decision API's URL
// as printed, a cancel func and the exit code channel.
func runServe(t *testing.T, args ...string) (api string, cancel context.CancelFunc, code <-chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- serve(ctx, args, pw, &lockedWriter{w: &stderr})
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := reAPI.FindStringSubmatch(sc.Text()); m != nil {
			api = m[1]
			break
		}
	}
	if api == "" {
		cancel()
		t.Fatalf("serve %v printed no decision API address (exit %d)", args, <-done)
	}
	// Keep draining stdout so serve never blocks on it.
	go func() {
		for sc.Scan() {
		}
	}()
	return api, cancel, done
}

// holdPort8080 makes sure 127.0.0.1:8080, the built-in example's address,
// is busy for the test: it listens there, or finds it already held by
// someone else (a sluice serve in another terminal), which is as good.
func holdPort8080(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err == nil {
		t.Cleanup(func() { ln.Close() })
	}
}

// TestServeBuiltinExample: with no -config, serve runs the built-in example
// on the memory store, -listen moves it (here to a free port, while
// 127.0.0.1:8080 is held), it prints the address it bound, answers
// /healthz, and exits 0 on cancel.
func TestServeBuiltinExample(t *testing.T) {
	holdPort8080(t)
	api, cancel, code := runServe(t, "-listen", "127.0.0.1:0")
	if strings.HasSuffix(api, ":0") || strings.HasSuffix(api, ":8080") {
		t.Errorf("serve -listen 127.0.0.1:0 printed %s, want the port it bound", api)
	}
	resp, err := http.Get(api + "/healthz")
	if err != nil {
		t.Fatalf("GET %s/healthz: %v", api, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s/healthz: %d, want 200", api, resp.StatusCode)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("serve after cancel: exit %d, want 0", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30s of cancel")
	}
}

// TestServeListenFlags: -listen and -proxy-listen override a config's
// fixed addresses (held busy here), and the printed addresses are the
// bound ones.
func TestServeListenFlags(t *testing.T) {
	busy := make([]net.Listener, 2)
	for i := range busy {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		busy[i] = ln
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	cfg := fmt.Sprintf("listen: %s\nproxy: {listen: %s, upstream: %s}\nrules:\n  - name: r\n    rate: 1/m\n",
		busy[0].Addr(), busy[1].Addr(), up.URL)
	path := writeConfig(t, cfg)
	// The config's own addresses are busy: serve fails, naming the fix.
	var stdout, stderr strings.Builder
	if c := serve(t.Context(), []string{"-config", path}, &stdout, &stderr); c != 1 || !strings.Contains(stderr.String(), "-listen") {
		t.Errorf("serve on busy addresses: exit %d, stderr %q; want 1 and a hint naming -listen", c, stderr.String())
	}

	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var errs strings.Builder
	go func() {
		done <- serve(ctx, []string{"-config", path, "-listen", "127.0.0.1:0", "-proxy-listen", "127.0.0.1:0"}, pw, &lockedWriter{w: &errs})
		pw.Close()
	}()
	reProxy := regexp.MustCompile(`proxy on (http://\S+)`)
	var api, proxy string
	sc := bufio.NewScanner(pr)
	for (api == "" || proxy == "") && sc.Scan() {
		if m := reAPI.FindStringSubmatch(sc.Text()); m != nil {
			api = m[1]
		}
		if m := reProxy.FindStringSubmatch(sc.Text()); m != nil {
			proxy = m[1]
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	defer func() {
		cancel()
		if c := <-done; c != 0 {
			t.Errorf("serve after cancel: exit %d, want 0 (stderr %s)", c, errs.String())
		}
	}()
	for _, u := range []string{api, proxy} {
		if u == "" || strings.HasSuffix(u, ":0") || strings.Contains(u, busy[0].Addr().String()) || strings.Contains(u, busy[1].Addr().String()) {
			t.Fatalf("serve -listen :0 -proxy-listen :0 printed api %q proxy %q, want two bound free ports", api, proxy)
		}
	}
	resp, err := http.Get(proxy + "/")
	if err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "upstream" {
		t.Errorf("GET through the proxy = %q, want the upstream's answer", b)
	}
}

func TestServeListenFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-listen", "nowhere"},
		{"-proxy-listen", "127.0.0.1:0"}, // the built-in example has no proxy
		{"-grpc-listen", "127.0.0.1:0"},
	} {
		var stdout, stderr strings.Builder
		if c := serve(t.Context(), args, &stdout, &stderr); c != 2 || !strings.Contains(stderr.String(), args[0]) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 naming %s", args, c, stderr.String(), args[0])
		}
	}
}

// TestServeConfigFile runs serve on a config file with a proxy on :0.
func TestServeConfigFile(t *testing.T) {
	path := writeConfig(t, "listen: 127.0.0.1:0\nrules:\n  - name: r\n    rate: 1/m\n")
	api, cancel, code := runServe(t, "-config", path)
	resp, err := http.Get(api + "/v1/rules")
	if err != nil {
		t.Fatalf("GET /v1/rules: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/rules: %d, want 200", resp.StatusCode)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("serve -config after cancel: exit %d, want 0", c)
	}
}

// TestServeSIGHUP: SIGHUP rereads the config file, even unchanged.
func TestServeSIGHUP(t *testing.T) {
	path := writeConfig(t, "listen: 127.0.0.1:0\nrules:\n  - name: r\n    rate: 1/m\n")
	api, cancel, code := runServe(t, "-config", path)
	defer func() {
		cancel()
		if c := <-code; c != 0 {
			t.Errorf("serve after cancel: exit %d, want 0", c)
		}
	}()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The reload runs in the background: poll /metrics, bounded.
	want := `sluice_config_reloads_total{result="success"} 1`
	deadline := time.Now().Add(time.Minute) // a bound for a hung reload, not a performance threshold
	for {
		resp, err := http.Get(api + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute of SIGHUP", want)
		}
		time.Sleep(10 * time.Millisecond) // polling the metrics endpoint
	}
}

func TestServeBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nrules:\n  - name: r\n    rate: banana\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	if c := serve(context.Background(), []string{"-config", path}, &stdout, &stderr); c != 1 {
		t.Errorf("serve -config bad.yaml: exit %d, want 1", c)
	}
	if !strings.Contains(stderr.String(), "bad.yaml:4") {
		t.Errorf("serve -config bad.yaml: stderr %q, want the file:line of the problem", stderr.String())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestPrintRules: serve lists the rules in force at startup (the built-in
// example's, here), and bounds the list.
func TestPrintRules(t *testing.T) {
	cfg, err := config.Parse(builtinName, config.Example())
	if err != nil {
		t.Fatal(err)
	}
	set, err := cfg.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printRules(&b, set, false)
	want := "sluice: rule demo-per-ip: 5/m per ip, sliding_window_counter, reject\n" +
		"sluice: rule demo-per-api-key: 100/m (burst 20) per header:X-Api-Key on /api/*, token_bucket, reject\n"
	if b.String() != want {
		t.Errorf("printRules(built-in example) =\n%s\nwant\n%s", b.String(), want)
	}
	odd, err := rules.Compile("t.yaml", []rules.Spec{
		{Name: "m", Rate: "1/s", Match: rules.MatchSpec{Methods: []string{"POST", "put"}}},
		{Name: "c", Rate: "1/s", Match: rules.MatchSpec{Path: "/Login", CaseInsensitive: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	printRules(&b, odd, false)
	want = "sluice: rule m: 1/s per ip on POST PUT, sliding_window_counter, reject\n" +
		"sluice: rule c: 1/s per ip on /Login (any case), sliding_window_counter, reject\n"
	if b.String() != want {
		t.Errorf("printRules(methods only, case-insensitive path) =\n%s\nwant\n%s", b.String(), want)
	}
	var specs []rules.Spec
	for i := range 12 {
		specs = append(specs, rules.Spec{Name: fmt.Sprintf("r%d", i), Rate: "1/s", Key: []string{"ip", "method"}, Match: rules.MatchSpec{Methods: []string{"POST"}, Path: "/x"}})
	}
	many, err := rules.Compile("t.yaml", specs)
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	printRules(&b, many, false)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 11 || lines[0] != "sluice: rule r0: 1/s per ip+method on POST /x, sliding_window_counter, reject" ||
		lines[10] != "sluice: … and 2 more rules (GET /v1/rules lists them all)" {
		t.Errorf("printRules(12 rules) =\n%s", b.String())
	}
}

// TestServeEnvoyOnlyBanner: a config with a grpc block and no rules (the
// Envoy service alone, as docs/envoy.md runs it) does not say that every
// request passes: the descriptor files limit the Envoy service's calls.
func TestServeEnvoyOnlyBanner(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ratelimit.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("grpc:\n  listen: 127.0.0.1:8081\n  config: [ratelimit.yaml]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := serveBanner(t, func(l string) bool {
		return strings.HasPrefix(l, "sluice: no rules") || strings.HasPrefix(l, "sluice: rule ")
	}, nil,
		"-config", path, "-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0")
	last := got[strings.LastIndex(strings.TrimSuffix(got, "\n"), "\n")+1:]
	if strings.Contains(last, "every request passes") || !strings.Contains(last, "descriptor") {
		t.Errorf("serve with descriptors and no rules printed\n%s\nwant its last line to say that the descriptors limit the Envoy service, not that every request passes", got)
	}
}

// TestServeBusyPortHint: a listen address that is taken exits 1 with a
// hint that fits what the user asked for: the built-in example's own port
// (free it, or move it with -listen), or an address the user chose with
// -listen, which no hint may call the built-in example's.
func TestServeBusyPortHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	holdPort8080(t)
	for _, c := range []struct {
		args     []string
		want     []string
		dontWant string
	}{
		{nil, []string{"127.0.0.1:8080", "the built-in example's port is busy", "-listen 127.0.0.1:0"}, ""},
		{[]string{"-listen", busy}, []string{busy, "-listen address " + busy + " is in use", "-listen 127.0.0.1:0"}, "built-in example's port"},
	} {
		var stdout, stderr strings.Builder
		code := serve(t.Context(), c.args, &stdout, &stderr)
		if code != 1 {
			t.Errorf("serve %q with its address taken: exit %d, want 1; stderr %q", c.args, code, stderr.String())
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("serve %q with its address taken: stderr %q, want it to say %q", c.args, stderr.String(), w)
			}
		}
		if c.dontWant != "" && strings.Contains(stderr.String(), c.dontWant) {
			t.Errorf("serve %q with its address taken: stderr %q says %q, but the user chose the address", c.args, stderr.String(), c.dontWant)
		}
	}
}

// writeConfig writes yaml to sluice.yaml in a directory of the test's
// own, and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
