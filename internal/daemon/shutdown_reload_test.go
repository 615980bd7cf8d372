package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestReloadDuringShutdown: once the shutdown has begun, a reload (SIGHUP)
// is refused with ErrShuttingDown and counted nowhere, and the config in
// force stays: the request still in flight finishes under it, and nothing
// is built on a store about to close. After Run has returned, likewise.
func TestReloadDuringShutdown(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "late answer")
	}))
	defer up.Close()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	yaml := func(rate string) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nproxy: {listen: 127.0.0.1:0, upstream: %s}\nshutdown_timeout: 1m\nrules:\n  - name: r\n    rate: %s\n", up.URL, rate)
	}
	td := startDaemon(t, yaml("10/m"))
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Get(td.proxy + "/slow")
		if err != nil {
			answered <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- td.stop() }()
	waitFor(t, "the shutdown's start", func() bool { return strings.Contains(td.logs.String(), "shutting down") })

	if err := os.WriteFile(td.path, []byte(yaml("20/m")), 0o644); err != nil {
		t.Fatal(err)
	}
	reloadRefused := func(when string) {
		t.Helper()
		if err := td.d.Reload(); !errors.Is(err, ErrShuttingDown) {
			t.Errorf("Reload %s: %v, want ErrShuttingDown", when, err)
		}
		if got := td.d.Config().Rules[0].Rate; got != "10/m" {
			t.Errorf("rule r's rate after a Reload %s: %s, want 10/m (the config in force stays)", when, got)
		}
		for _, res := range []string{"success", "failure"} {
			if n := td.metric("sluice_config_reloads_total", "result", res); n != 0 {
				t.Errorf("sluice_config_reloads_total{result=%q} after a Reload %s: %v, want 0", res, when, n)
			}
		}
	}
	reloadRefused("during the shutdown")

	close(release)
	released = true
	if a := <-answered; a != "200 late answer" {
		t.Errorf("the request in flight at the shutdown: %s, want 200 late answer", a)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run: %v, want nil", err)
	}
	reloadRefused("after Run returned")
}

// TestReloadApplyingAtShutdown: a reload already applying when the
// shutdown begins (a SIGHUP just before the SIGTERM) is finished, whole,
// before the shutdown closes the store and Run returns. The reload is held
// mid-way (the new generation stored, the long-lived parts not yet
// pointed at it) by the logger, at its renewed certificate's record.
func TestReloadApplyingAtShutdown(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := tlstest.NewCA(t, "server")
	serve := func(p tlstest.Pair) {
		replace(t, certFile, read(t, p.CertFile))
		replace(t, keyFile, read(t, p.KeyFile))
	}
	serve(ca.Server(t))
	path := filepath.Join(dir, "sluice.yaml")
	yaml := func(rate string) []byte {
		return fmt.Appendf(nil, "listen: 127.0.0.1:0\napi: {tls: {cert: %s, key: %s}}\nrules:\n  - name: r\n    rate: %s\n", certFile, keyFile, rate)
	}
	if err := os.WriteFile(path, yaml("10/m"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := new(redistest.SyncBuffer)
	h := &pauseHandler{Handler: slog.NewTextHandler(logs, nil), msg: "tls: certificate reloaded", once: new(sync.Once), paused: make(chan struct{}), resume: make(chan struct{})}
	var resumeOnce sync.Once
	resume := func() { resumeOnce.Do(func() { close(h.resume) }) }
	defer resume()
	// The watchers' debounce outlasts the test: the Reload below is the
	// only reload.
	d, err := New(cfg, Options{Logger: slog.New(h), ConfigPath: path, ReloadDebounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	defer func() {
		if t.Failed() {
			t.Logf("daemon logs:\n%s", logs.String())
		}
	}()

	serve(ca.Server(t))
	if err := os.WriteFile(path, yaml("20/m"), 0o644); err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan error, 1)
	go func() { reloaded <- d.Reload() }()
	select {
	case <-h.paused:
	case err := <-reloaded:
		t.Fatalf("Reload returned (%v) without serving the renewed certificate", err)
	case <-time.After(safety):
		t.Fatal("Reload did not reach the renewed certificate")
	}
	cancel()
	// The shutdown goes as far as the reload lets it: to closing the
	// connections the servers left, which waits for the reload.
	var returned error
	waitFor(t, "the shutdown waiting for the reload, or Run returned", func() bool {
		select {
		case returned = <-ran:
			return true
		default:
		}
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*Daemon).closeConns")
	})
	if returned != nil || strings.Contains(logs.String(), "shut down") {
		t.Fatalf("the shutdown ended (Run: %v) while a reload was applying", returned)
	}
	resume()
	if err := <-reloaded; err != nil {
		t.Errorf("the reload applying at the shutdown: %v, want it applied whole", err)
	}
	if got := d.Config().Rules[0].Rate; got != "20/m" {
		t.Errorf("rule r's rate after the reload: %s, want 20/m", got)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v, want nil", err)
	}
	if err := d.Reload(); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Reload after Run returned: %v, want ErrShuttingDown", err)
	}
}

// pauseHandler holds the goroutine that logs the first record whose
// message is msg until resume is closed, having closed paused.
type pauseHandler struct {
	slog.Handler
	msg    string
	once   *sync.Once
	paused chan struct{}
	resume chan struct{}
}

func (h *pauseHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message == h.msg {
		h.once.Do(func() {
			close(h.paused)
			<-h.resume
		})
	}
	return err
}

func (h *pauseHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.Handler = h.Handler.WithAttrs(as)
	return &c
}

func (h *pauseHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.Handler = h.Handler.WithGroup(name)
	return &c
}
