package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingUpstream is a real upstream that counts the connections open
// to it (hijacked ones until their handler closes them) and, on Upgrade:
// echo, switches to a tunnel that echoes lines until either side closes.
type countingUpstream struct {
	url    string
	open   atomic.Int64
	ended  chan struct{} // a tunnel's upstream side ended
	joined chan struct{} // a tunnel is up
}

func startCountingUpstream(t *testing.T) *countingUpstream {
	t.Helper()
	u := &countingUpstream{ended: make(chan struct{}, 8), joined: make(chan struct{}, 8)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			io.WriteString(w, "ok")
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer func() { conn.Close(); u.open.Add(-1); u.ended <- struct{}{} }()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		u.joined <- struct{}{}
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo: " + line)
			brw.Flush()
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.open.Add(1)
		case http.StateClosed:
			u.open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// TestShutdownClosesUpstreamConnections: once Run has returned, the
// proxy's idle upstream connections (the pooled fast path's and
// ReverseProxy's) are closed; an upstream that keeps idle connections
// open (net/http's default) would otherwise hold them, and the daemon's
// file descriptors, after the daemon has stopped (a daemon embedded by
// Run(ctx) in a process that goes on).
func TestShutdownClosesUpstreamConnections(t *testing.T) {
	up := startCountingUpstream(t)
	td := startDaemon(t, proxyConfig(up.url, "rules:\n  - {name: all, rate: 1000/s}\n"))
	if r := get(t, td.proxy+"/"); r.status != http.StatusOK {
		t.Fatalf("GET: %d", r.status)
	}
	resp, err := http.Post(td.proxy+"/", "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if up.open.Load() == 0 {
		t.Fatal("no upstream connection open: the test would test nothing")
	}
	if err := td.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	waitFor(t, "the upstream connections closed after Run returned", func() bool { return up.open.Load() == 0 })
}

// TestShutdownEndsTunnels: an upgraded connection (WebSocket) through the
// proxy, which a graceful shutdown does not wait for, is closed on both
// sides by the time Run returns: it would otherwise go on being relayed,
// two goroutines and two descriptors, by a daemon that has stopped.
func TestShutdownEndsTunnels(t *testing.T) {
	up := startCountingUpstream(t)
	td := startDaemon(t, proxyConfig(up.url, "shutdown_timeout: 30s\n"))
	c, err := net.Dial("tcp", strings.TrimPrefix(td.proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v, want 101", resp, err)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("through the tunnel: %q %v", line, err)
	}
	if err := td.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Run has returned: the tunnel is closed, or closes without the client
	// doing anything (the deadline is a safety net, not a timing).
	c.SetReadDeadline(time.Now().Add(safety))
	if b, err := io.ReadAll(br); err != nil {
		t.Errorf("client side of the tunnel after Run returned: %q %v, want it closed (EOF)", b, err)
	}
	waitFor(t, "the upstream side of the tunnel closed", func() bool { return up.open.Load() == 0 })
}
