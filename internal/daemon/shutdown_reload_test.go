package daemon

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
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
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(td.logs.String(), "shutting down"); { // a hang guard
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown within 30s of cancel; logs:\n%s", td.logs.String())
		}
		time.Sleep(time.Millisecond) // polling the logs for the shutdown's start
	}

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
