package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/socktest"
)

// The banner names the Unix sockets of -listen and -grpc-listen as
// unix:/PATH, and the try-it line of the built-in example reaches the
// socket.
func TestServeBannerUnix(t *testing.T) {
	dir := socktest.Dir(t)
	got := serveBanner(t, func(l string) bool { return strings.HasPrefix(l, "sluice: try it") }, nil,
		"-listen", "unix:"+dir+"/api.sock")
	if !strings.Contains(got, "sluice: decision API on unix:"+dir+"/api.sock (POST /v1/check") {
		t.Errorf("banner:\n%s\nwant the decision API on unix:%s/api.sock", got, dir)
	}
	if !strings.Contains(got, "curl -s -X POST --unix-socket "+dir+"/api.sock http://sluice/v1/check") {
		t.Errorf("banner:\n%s\nwant a try-it line with --unix-socket", got)
	}

	desc := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(desc, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, "listen: 127.0.0.1:0\ngrpc: {listen: 127.0.0.1:0, config: ["+desc+"]}\n")
	got = serveBanner(t, func(l string) bool { return strings.Contains(l, "Envoy rate limit service") }, nil,
		"-config", path, "-grpc-listen", "unix:"+dir+"/grpc.sock")
	if !strings.Contains(got, "sluice: Envoy rate limit service (gRPC) on unix:"+dir+"/grpc.sock ") {
		t.Errorf("banner:\n%s\nwant the gRPC service on unix:%s/grpc.sock", got, dir)
	}
}

// A -listen on a socket another process listens on fails the start,
// exit 1, with the in-use hint; a relative one is a usage error.
func TestServeUnixInUse(t *testing.T) {
	dir := socktest.Dir(t)
	ln, err := net.Listen("unix", dir+"/api.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr bytes.Buffer
	if code := serve(context.Background(), []string{"-listen", "unix:" + dir + "/api.sock"}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "another process listens on "+dir+"/api.sock") || !strings.Contains(stderr.String(), "is in use") {
		t.Errorf("serve on a live socket: exit %d, stderr %q; want 1, naming the socket, with the in-use hint", code, stderr.String())
	}
	stderr.Reset()
	if code := serve(context.Background(), []string{"-listen", "unix:api.sock"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "not absolute") {
		t.Errorf("serve -listen unix:api.sock: exit %d, stderr %q; want 2, not absolute", code, stderr.String())
	}
}

// check-config warns of rules keyed by ip on a Unix-socket listen whose
// peers are not trusted, and passes the config.
func TestCheckConfigUnixWarning(t *testing.T) {
	dir := socktest.Dir(t)
	path := writeConfig(t, "listen: unix:"+dir+"/api.sock\nrules:\n  - {name: per-ip, key: [ip], rate: 5/m}\n")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"check-config", path}, nil, &stdout, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "listen: warning:") || !strings.Contains(stderr.String(), "(per-ip)") ||
		!strings.Contains(stdout.String(), "; api unix:"+dir+"/api.sock") {
		t.Errorf("check-config: exit %d, stdout %q, stderr %q; want 0, a warning naming per-ip, the socket in the summary", code, stdout.String(), stderr.String())
	}
}

// `sluice serve` on a Unix socket, stopped by SIGTERM (the graceful
// drain): it exits 0, and its socket is gone.
func TestServeUnixSIGTERM(t *testing.T) {
	dir := socktest.Dir(t)
	sock := dir + "/api.sock"
	path := writeConfig(t, "listen: unix:"+sock+"\nrules:\n  - {name: r, key: [header:X-Key], rate: 5/m}\n")
	p := startSigProc(t, path)
	p.waitLog("decision API on unix:" + sock)
	c := socktest.Client(sock, 30*time.Second)
	check := func() (int, error) {
		resp, err := c.Post("http://sluice/v1/check", "application/json", strings.NewReader(`{"rule":"r","key":"k","cost":5}`))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if code, err := check(); err != nil || code != http.StatusOK {
		t.Fatalf("check over the socket: %d, %v", code, err)
	}
	p.signal(syscall.SIGTERM)
	p.waitLog("shut down")
	p.wantExit("SIGTERM", 0)
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket after SIGTERM: %v, want it removed", err)
	}
}
