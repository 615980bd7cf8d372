package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/socktest"
)

// unixDo sends a request over c to the decision API at path "http://sluice"+target.
func unixDo(t *testing.T, c *http.Client, method, target, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://sluice"+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// gone reports whether nothing is at path.
func gone(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, os.ErrNotExist)
}

// The decision API on a Unix socket: made with mode 0660 whatever the
// umask, decisions and health over it, named unix:PATH, and removed when
// the daemon stops.
func TestUnixDecisionAPI(t *testing.T) {
	sock := filepath.Join(socktest.Dir(t), "api.sock")
	td := startDaemon(t, "listen: unix:"+sock+"\nrules:\n  - {name: r, key: [header:X-Key], rate: 2/h}\n")
	if got := td.d.Addrs().API; got != "unix:"+sock {
		t.Errorf("Addrs().API = %q, want unix:%s", got, sock)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Fatalf("the socket: %v, %v; want a socket with mode 0660", fi.Mode(), err)
	}
	c := socktest.Client(sock, 20*time.Second)
	if r := unixDo(t, c, "GET", "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("GET /healthz: %d %q", r.status, r.body)
	}
	for i, want := range []bool{true, true, false} {
		r := unixDo(t, c, "POST", "/v1/check", `{"rule":"r","key":"k"}`, "Content-Type", "application/json")
		if r.status != http.StatusOK || strings.Contains(r.body, `"allowed":true`) != want {
			t.Errorf("check %d: %d %q, want allowed %v", i+1, r.status, r.body, want)
		}
	}
	if !strings.Contains(td.logs.String(), "addr=http+unix:"+sock) && !strings.Contains(td.logs.String(), "addr=unix:"+sock) {
		t.Errorf("the log does not name the socket:\n%s", td.logs.String())
	}
	if err := td.stop(); err != nil {
		t.Fatal(err)
	}
	if !gone(sock) {
		t.Errorf("%s is still there after the daemon stopped", sock)
	}
}

// Forward auth over a Unix socket. Its peer has no address: without
// "unix:" in trusted_proxies, the gateway's X-Forwarded-For is not
// believed and every client shares one count (key "unix:"), which the
// log says, naming the gateway unix:; with it, each client counts apart.
func TestUnixForwardAuth(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted=%v", trusted), func(t *testing.T) {
			sock := filepath.Join(socktest.Dir(t), "api.sock")
			y := "listen: unix:" + sock + "\nrules:\n  - {name: per-ip, key: [ip], rate: 2/h}\n"
			if trusted {
				y += "client_ip: {trusted_proxies: [127.0.0.1, unix:]}\n"
			}
			td := startDaemon(t, y)
			c := socktest.Client(sock, 20*time.Second)
			ask := func(client string) reply {
				return unixDo(t, c, "GET", "/v1/forward-auth", "", "X-Forwarded-Uri", "/x", "X-Forwarded-Method", "GET", "X-Forwarded-For", client)
			}
			for i := range 2 {
				if r := ask("203.0.113.1"); r.status != http.StatusOK {
					t.Fatalf("client 1, request %d: %d %q", i+1, r.status, r.body)
				}
			}
			r := ask("203.0.113.2")
			logs := td.logs.String()
			if !trusted {
				if r.status != http.StatusTooManyRequests {
					t.Errorf("another client, untrusted socket: %d, want 429 (one count for the socket)", r.status)
				}
				if !strings.Contains(logs, "trusted_proxies") || !strings.Contains(logs, "gateway=unix:") {
					t.Errorf("the log does not warn of the untrusted gateway unix::\n%s", logs)
				}
				if strings.Count(logs, "per-ip") != 1 {
					t.Errorf("the start does not warn, once, that per-ip counts the socket's clients as one:\n%s", logs)
				}
				return
			}
			if r.status != http.StatusOK {
				t.Errorf("another client, trusted socket: %d %q, want 200 (its own count)", r.status, r.body)
			}
			if r := ask("203.0.113.1"); r.status != http.StatusTooManyRequests {
				t.Errorf("client 1, request 3: %d, want 429", r.status)
			}
			if strings.Contains(logs, "trusted_proxies") {
				t.Errorf("a warning of trusted_proxies with unix: listed:\n%s", logs)
			}
		})
	}
}

// The Envoy rate limit service on a Unix socket, reached as grpc-go's
// unix:///PATH, and its socket removed at shutdown.
func TestUnixGRPC(t *testing.T) {
	dir := socktest.Dir(t)
	sock := filepath.Join(dir, "grpc.sock")
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(envoyDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, "listen: 127.0.0.1:0\ngrpc:\n  listen: unix:"+sock+"\n  config: ["+filepath.Join(dir, "rl.yaml")+"]\n")
	if got := td.d.Addrs().GRPC; got != "unix:"+sock {
		t.Errorf("Addrs().GRPC = %q, want unix:%s", got, sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "a"}, {Key: "user", Value: "u"}}}}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r, err := rls.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil || r.OverallCode != want {
			t.Fatalf("call %d: %v, %v; want %v", i+1, r.GetOverallCode(), err, want)
		}
	}
	conn.Close()
	if err := td.stop(); err != nil {
		t.Fatal(err)
	}
	if !gone(sock) {
		t.Errorf("%s is still there after the daemon stopped", sock)
	}
}

// A socket left by a daemon that was killed (nothing accepts on it) is
// removed and listened on again.
func TestUnixStaleSocket(t *testing.T) {
	sock := filepath.Join(socktest.Dir(t), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := net.Dial("unix", sock); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("the stale socket: dial %v, want ECONNREFUSED", err)
	}
	td := startDaemon(t, "listen: unix:"+sock+"\n")
	if r := unixDo(t, socktest.Client(sock, 20*time.Second), "GET", "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("GET /healthz: %d %q", r.status, r.body)
	}
	if err := td.stop(); err != nil {
		t.Fatal(err)
	}
	if !gone(sock) {
		t.Errorf("%s is still there after the daemon stopped", sock)
	}
}

// A socket something accepts on is another process's: the daemon refuses
// to start (EADDRINUSE, as a TCP port in use), and leaves it alone. So is
// a path that is not a socket: never removed.
func TestUnixPathTaken(t *testing.T) {
	dir := socktest.Dir(t)
	live := filepath.Join(dir, "live.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file := filepath.Join(dir, "file.sock")
	cases := []struct {
		path string
		want string
		cfg  *config.Config
	}{
		{live, "another process listens on " + live, nil},
		{file, file + " is not a socket", nil},
	}
	// Parsed before the file is made: Parse refuses a path that is not
	// a socket too, and the daemon checks again when it binds.
	for i := range cases {
		var err error
		if cases[i].cfg, err = config.Parse("u.yaml", []byte("listen: unix:"+cases[i].path+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		d, err := New(tc.cfg, Options{})
		if err == nil {
			d.Close()
			t.Fatalf("New on %s: started", tc.path)
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "decision API") {
			t.Errorf("New on %s: %v, want an error naming the decision API and %q", tc.path, err, tc.want)
		}
		if tc.path == live && !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("New on a live socket: %v, want EADDRINUSE", err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the regular file: %q, %v; want it left as it was", b, err)
	}
	c, err := net.Dial("unix", live)
	if err != nil {
		t.Fatalf("the other process's socket no longer takes connections: %v", err)
	}
	c.Close()
}

// max_connections caps the connections of a Unix-socket listener as of
// a TCP one: one more is answered 503 and closed.
func TestUnixMaxConnections(t *testing.T) {
	sock := filepath.Join(socktest.Dir(t), "api.sock")
	startDaemon(t, "listen: unix:"+sock+"\napi: {max_connections: 1}\n")
	first, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	br := bufio.NewReader(first)
	if _, err := io.WriteString(first, "GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first connection: %v, %v", resp, err)
	}
	resp.Body.Close()
	second, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(second, "GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n")
	br2 := bufio.NewReader(second)
	if resp, err := http.ReadResponse(br2, nil); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the connection past max_connections: %v, %v; want 503", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	if _, err := br2.ReadByte(); err == nil {
		t.Error("the connection past max_connections stayed open after its 503")
	}
}

// A reload that changes a Unix-socket listen is refused, as a TCP one's:
// it needs a restart.
func TestUnixReloadListen(t *testing.T) {
	dir := socktest.Dir(t)
	td := startDaemon(t, "listen: unix:"+filepath.Join(dir, "a.sock")+"\n")
	replaceFile(t, td.path, "listen: unix:"+filepath.Join(dir, "b.sock")+"\n")
	if r := td.waitReload(); !errors.Is(r.Err, errRestartOnly) || !strings.Contains(r.Err.Error(), "listen") {
		t.Errorf("reload error %v, want a refusal naming listen", r.Err)
	}
	if gone(filepath.Join(dir, "a.sock")) || !gone(filepath.Join(dir, "b.sock")) {
		t.Error("a refused reload moved the socket")
	}
}
