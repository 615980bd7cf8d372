package daemon

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// A reload that rebuilds the proxy (here client_ip changes) closes the
// old proxy's idle upstream connections: nothing uses them any more, and
// an upstream that keeps idle connections open (net/http's default)
// would otherwise hold them, and their file descriptors, for ever, one
// pool more per reload.
func TestReloadClosesOldUpstreamConnections(t *testing.T) {
	var open atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	const rules = "rules:\n  - {name: all, rate: 1000/s}\n"
	td := startDaemon(t, proxyConfig(up.URL, rules))
	// A GET (the pooled fast path) and a POST (ReverseProxy's transport):
	// each leaves an idle connection to the upstream.
	if r := get(t, td.proxy+"/"); r.status != http.StatusOK {
		t.Fatalf("GET: %d", r.status)
	}
	resp, err := http.Post(td.proxy+"/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if open.Load() == 0 {
		t.Fatal("no upstream connection open: the test would test nothing")
	}
	replaceFile(t, td.path, proxyConfig(up.URL, "client_ip:\n  trusted_proxies: [10.0.0.0/8]\n"+rules))
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}
	waitFor(t, "the old proxy's idle upstream connections closed", func() bool { return open.Load() == 0 })
	if r := get(t, td.proxy+"/"); r.status != http.StatusOK {
		t.Errorf("GET after the reload: %d", r.status)
	}
}
