package daemon

import (
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

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestShutdownFinishesInFlight: on cancel the daemon stops accepting at
// once but lets a request already at a slow upstream complete, and Run
// returns nil only after it has.
func TestShutdownFinishesInFlight(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newUpstreamFunc(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "slow but complete")
	})
	td := startDaemon(t, proxyConfig(up, ""))
	proxyAddr := strings.TrimPrefix(td.proxy, "http://")

	type result struct {
		r   reply
		err error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := http.Get(td.proxy + "/slow")
		if err != nil {
			inflight <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		inflight <- result{reply{status: resp.StatusCode, body: string(b)}, err}
	}()
	<-arrived

	stopped := make(chan error, 1)
	go func() { stopped <- td.stop() }()

	// New connections are refused once shutdown has begun (polled: the
	// listener closes asynchronously).
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", proxyAddr)
		if errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
		// A connection accepted, or reset while the listener closes.
		if c != nil {
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatal("proxy still accepting 10s after cancel")
		}
		time.Sleep(5 * time.Millisecond) // polling for the listener to close
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	res := <-inflight
	if res.err != nil || res.r.status != http.StatusOK || res.r.body != "slow but complete" {
		t.Errorf("in-flight request during shutdown: %d %q %v, want 200 with the full body", res.r.status, res.r.body, res.err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run after graceful shutdown: %v, want nil", err)
	}
}

// TestShutdownBounded: a request that never finishes does not hold the
// shutdown past shutdown_timeout.
func TestShutdownBounded(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newUpstreamFunc(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
	})
	t.Cleanup(func() { close(release) }) // runs before the upstream's Close
	td := startDaemon(t, proxyConfig(up, "shutdown_timeout: 100ms\n"))
	go func() {
		if resp, err := http.Get(td.proxy + "/stuck"); err == nil {
			resp.Body.Close()
		}
	}()
	<-arrived
	// stop fails unless Run returns within 30s: a hang detector (the
	// request never finishes), not a measure of the 100ms, which a loaded
	// machine can overrun by seconds. That the wait was shutdown_timeout's
	// is what the logs say: the shutdown's bound, and the requests cut when
	// it ran out (the servers' Shutdown ended by its deadline); and that
	// it was not the default's, that Run returned before that (10s, a
	// hundred times the 100ms).
	start := time.Now()
	if err := td.stop(); err != nil {
		t.Errorf("Run after a forced shutdown: %v, want nil (logged instead)", err)
	}
	if took := time.Since(start); took >= DefaultShutdownTimeout {
		t.Errorf("shutdown took %v with shutdown_timeout 100ms: the default's bound (%v), not shutdown_timeout's", took, DefaultShutdownTimeout)
	}
	logs := td.logs.String()
	for _, want := range []string{
		`msg="shutting down: no new connections; waiting for requests in flight" shutdown_timeout=100ms`,
		`msg="requests still in flight at shutdown_timeout: closing their connections" shutdown_timeout=100ms err="context deadline exceeded"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("forced shutdown: no %s in the logs:\n%s", want, logs)
		}
	}
}

// TestStoreOnError stops a real redis-server under a running daemon.
func TestStoreOnError(t *testing.T) {
	for _, c := range []struct {
		policy string
		want   int
	}{
		{"allow", http.StatusOK},
		{"deny", http.StatusServiceUnavailable},
	} {
		t.Run(c.policy, func(t *testing.T) {
			rs := redistest.StartServer(t)
			up := startUpstream(t)
			td := startDaemon(t, proxyConfig(up.url, fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%s], timeout: 2s}
  on_error: %s
rules:
  - name: per-ip
    key: [ip]
    rate: 100/m
`, rs.Addr, c.policy)))
			if r := get(t, td.proxy+"/"); r.status != http.StatusOK {
				t.Fatalf("with Redis up: %d, want 200", r.status)
			}
			if r := get(t, td.api+"/readyz"); r.status != http.StatusOK {
				t.Errorf("GET /readyz with Redis up: %d, want 200", r.status)
			}
			rs.Stop()
			before := up.count()
			for i := range 3 {
				start := time.Now()
				r := get(t, td.proxy+"/")
				if r.status != c.want {
					t.Errorf("on_error %s, Redis stopped, request %d: %d, want %d", c.policy, i, r.status, c.want)
				}
				// A hang detector, not a measure: Redis stopped refuses
				// the connection at once, and the store's timeout (2s)
				// bounds a call in any case (redisstore's failure tests).
				if took := time.Since(start); took > 20*2*time.Second {
					t.Errorf("on_error %s: answered in %v: hung, past 20 store timeouts (2s)", c.policy, took)
				}
			}
			wantHits := before
			if c.policy == "allow" {
				wantHits += 3
			}
			if got := up.count(); got != wantHits {
				t.Errorf("on_error %s: upstream got %d requests, want %d", c.policy, got, wantHits)
			}
			if r := get(t, td.api+"/readyz"); r.status != http.StatusServiceUnavailable {
				t.Errorf("GET /readyz with Redis stopped: %d, want 503", r.status)
			}
			if r := get(t, td.api+"/healthz"); r.status != http.StatusOK {
				t.Errorf("GET /healthz with Redis stopped: %d, want 200 (the process is alive)", r.status)
			}
			if got := td.metric("sluice_store_errors_total"); got < 3 {
				t.Errorf("sluice_store_errors_total = %v, want ≥ 3", got)
			}
		})
	}
}

// TestBadCertificateRefused: a tls: block whose files are not a
// certificate and key stops the daemon at startup, naming file, line and
// key.
func TestBadCertificateRefused(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ratelimit.yaml", "c.pem", "k.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("domain: d\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "test.yaml")
	for _, c := range []struct{ yaml, want string }{
		{"grpc:\n  listen: 127.0.0.1:0\n  config: [ratelimit.yaml]\n  tls: {cert: c.pem, key: k.pem}\n", file + ":5: grpc.tls.cert: " + filepath.Join(dir, "c.pem") + ": no PEM certificate in it"},
		{"api:\n  tls: {cert: c.pem, key: k.pem}\n", file + ":3: api.tls.cert: " + filepath.Join(dir, "c.pem") + ": no PEM certificate in it"},
	} {
		cfg, err := config.Parse(file, []byte("listen: 127.0.0.1:0\n"+c.yaml))
		if err != nil {
			t.Fatalf("config.Parse: %v", err)
		}
		d, err := New(cfg, Options{})
		if err == nil {
			d.Close()
			t.Fatalf("New with a junk certificate: nil error, want %q", c.want)
		}
		if err.Error() != c.want {
			t.Errorf("New with a junk certificate: %v, want %q", err, c.want)
		}
	}
}

// TestListenBusy: a busy port is reported by New, naming the key.
func TestListenBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, err := config.Parse("test.yaml", []byte("listen: "+ln.Addr().String()+"\n"))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	d, err := New(cfg, Options{})
	if err == nil {
		d.Close()
		t.Fatal("New on a busy port: nil error")
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "listen") {
		t.Errorf("New on a busy port: %v, want EADDRINUSE naming listen", err)
	}
}
