package daemon

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/server"
)

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// safety bounds a wait for a condition that must come; it is not a timing
// assertion (the conditions come in milliseconds).
const safety = 30 * time.Second

// waitFor polls cond until it holds, failing after safety.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, safety)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawSend opens a TCP connection to addr (host:port) and writes s.
func rawSend(t *testing.T, addr, s string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads the status line of the answer on c and then everything
// up to the connection's close; it fails if the connection stays open.
func readAnswer(t *testing.T, c net.Conn) (status string, rest string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(safety))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answer: %v (got %q); want the connection closed", err, b)
	}
	line, rest, _ := strings.Cut(string(b), "\r\n")
	return line, rest
}

// TestStalledBodiesClosed: on each listener a request body that stops
// sending is cut after body_read_timeout with 408 and its connection
// closed; through the proxy the upstream request is abandoned, so its
// upstream connection is freed.
func TestStalledBodiesClosed(t *testing.T) {
	var upClosed atomic.Int64
	upErr := make(chan error, 1)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		upErr <- err
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			upClosed.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  body_read_timeout: 100ms
proxy:
  listen: 127.0.0.1:0
  upstream: `+up.URL+`
  body_read_timeout: 100ms
rules:
  - {name: all, rate: 1000/s}
`)
	api, proxy := strings.TrimPrefix(td.api, "http://"), strings.TrimPrefix(td.proxy, "http://")

	c := rawSend(t, proxy, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nthe first bytes, and then nothing")
	status, body := readAnswer(t, c)
	if status != "HTTP/1.1 408 Request Timeout" || !strings.Contains(body, `{"error":"request_timeout"}`) {
		t.Errorf("proxy, stalled body: %q %q; want 408 with {\"error\":\"request_timeout\"}", status, body)
	}
	select {
	case err := <-upErr:
		if err == nil {
			t.Error("the upstream read the whole body of a stalled upload")
		}
	case <-time.After(safety):
		t.Fatal("the upstream request of a stalled upload was not abandoned")
	}
	waitFor(t, "upstream connection closed", func() bool { return upClosed.Load() >= 1 })

	c = rawSend(t, api, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"rule\":\"all\",")
	status, body = readAnswer(t, c)
	if status != "HTTP/1.1 408 Request Timeout" || !strings.Contains(body, "body_read_timeout") {
		t.Errorf("decision API, stalled body: %q %q; want 408 naming body_read_timeout", status, body)
	}
	for _, l := range []string{"api", "proxy"} {
		if got := td.metric("sluice_body_timeouts_total", "listener", l); got != 1 {
			t.Errorf("sluice_body_timeouts_total{listener=%q} = %v, want 1", l, got)
		}
		waitFor(t, l+": slow connection counted", func() bool {
			return td.metric("sluice_connections_closed_slow_total", "listener", l) == 1
		})
	}
}

// TestAnswersWhileSlowClientsHeld: hundreds of connections trickling
// headers or bodies do not stop /healthz or decisions.
func TestAnswersWhileSlowClientsHeld(t *testing.T) {
	up := startUpstream(t)
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  read_header_timeout: 1h
  body_read_timeout: 1h
proxy:
  listen: 127.0.0.1:0
  upstream: `+up.url+`
  read_header_timeout: 1h
  body_read_timeout: 1h
rules:
  - {name: r, rate: 1000/s}
`)
	api, proxy := strings.TrimPrefix(td.api, "http://"), strings.TrimPrefix(td.proxy, "http://")
	const n = 200
	for i := range n {
		if i%2 == 0 {
			rawSend(t, api, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
			rawSend(t, proxy, "GET / HTTP/1.1\r\nHost: x\r\n") // headers never end
		} else {
			rawSend(t, api, "GET /healthz HTTP/1.1\r\n")
			rawSend(t, proxy, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
		}
	}
	waitFor(t, "slow connections held", func() bool {
		return td.metric("sluice_connections_open", "listener", "api") == n &&
			td.metric("sluice_connections_open", "listener", "proxy") == n
	})
	if r := get(t, td.api+"/healthz"); r.status != 200 {
		t.Errorf("/healthz with %d slow connections held: %d", 2*n, r.status)
	}
	if a, status := check(t, td.api, "r", "k", 1); status != 200 || !a.Allowed {
		t.Errorf("/v1/check with %d slow connections held: %d %+v", 2*n, status, a)
	}
	if r := get(t, td.proxy+"/"); r.status != 200 {
		t.Errorf("proxy with %d slow connections held: %d", 2*n, r.status)
	}
}

// TestMaxConnectionsRefused: beyond max_connections a connection is
// answered 503 {"error":"overloaded"} and closed, and counted; the ones
// held are not disturbed. (A gateway takes a connection closed unanswered
// for Sluice down, which its fail-open config lets through.)
func TestMaxConnectionsRefused(t *testing.T) {
	td := startDaemon(t, `listen: 127.0.0.1:0
api:
  max_connections: 3
  read_header_timeout: 1h
`)
	api := strings.TrimPrefix(td.api, "http://")
	var held []net.Conn
	for range 3 {
		held = append(held, rawSend(t, api, "GET /healthz HTTP/1.1\r\nHost: x\r\n"))
	}
	waitFor(t, "3 connections held", func() bool { return td.metric("sluice_connections_open", "listener", "api") == 3 })
	extra, err := net.Dial("tcp", api)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	extra.SetReadDeadline(time.Now().Add(safety))
	if b, err := io.ReadAll(extra); isTimeout(err) || !strings.HasPrefix(string(b), "HTTP/1.1 503 ") || !strings.HasSuffix(string(b), "\r\n\r\n"+`{"error":"overloaded"}`+"\n") {
		t.Errorf("connection beyond max_connections: read %q, %v; want a 503 {\"error\":\"overloaded\"}, then the close", b, err)
	}
	if got := td.metric("sluice_connections_refused_total", "listener", "api"); got != 1 {
		t.Errorf("sluice_connections_refused_total = %v, want 1", got)
	}
	// A held connection completes its request.
	io.WriteString(held[0], "\r\n")
	held[0].SetReadDeadline(time.Now().Add(safety))
	resp, err := http.ReadResponse(bufio.NewReader(held[0]), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("held connection: %v %v, want 200", resp, err)
	}
}

// TestStalledJSONBodyIs408: POST /json (the Envoy service's HTTP form)
// answers a stalled body as /v1/check does, 408 naming body_read_timeout,
// not 400 as if the client had sent a bad request.
func TestStalledJSONBodyIs408(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(envoyDescriptors), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	yaml := "listen: 127.0.0.1:0\napi:\n  body_read_timeout: 100ms\ngrpc:\n  listen: 127.0.0.1:0\n  config: [shop.yaml]\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	c := rawSend(t, strings.TrimPrefix(td.api, "http://"), "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"domain\":")
	status, body := readAnswer(t, c)
	if status != "HTTP/1.1 408 Request Timeout" || !strings.Contains(body, "body_read_timeout") {
		t.Errorf("POST /json, stalled body: %q %q; want 408 naming body_read_timeout", status, body)
	}
}

// TestStalledReaderCut: proxy.send_timeout reaches the proxy's listener —
// a client that stops reading a large answer is cut and counted slow,
// and its upstream request is abandoned.
func TestStalledReaderCut(t *testing.T) {
	upDone := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		var err error
		for n := 0; n < 256<<20 && err == nil; n += len(chunk) {
			_, err = w.Write(chunk)
		}
		upDone <- err
	}))
	t.Cleanup(up.Close)
	td := startDaemon(t, `listen: 127.0.0.1:0
proxy:
  listen: 127.0.0.1:0
  upstream: `+up.URL+`
  send_timeout: 100ms
rules:
  - {name: all, rate: 1000/s}
`)
	c := rawSend(t, strings.TrimPrefix(td.proxy, "http://"), "GET /download HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c // read nothing: the answer backs up into the proxy
	select {
	case err := <-upDone:
		if err == nil {
			t.Error("the upstream wrote 256 MiB to a client that reads nothing")
		}
	case <-time.After(safety):
		t.Fatal("a client that stopped reading still holds its upstream request after proxy.send_timeout")
	}
	waitFor(t, "stalled reader counted slow", func() bool {
		return td.metric("sluice_connections_closed_slow_total", "listener", "proxy") == 1
	})
}

// TestGRPCSendTimeout: the gRPC listener's connections have a send
// timeout, server.DefaultSendTimeout (the grpc block has no key for it):
// a client that stops reading its socket is cut and counted slow, as on
// the HTTP listeners (server.TestGRPCStalledReaderCut).
func TestGRPCSendTimeout(t *testing.T) {
	ed := startEnvoyDaemon(t, "")
	ln, ok := ed.d.grpcLn.(*listener.Listener)
	if !ok {
		t.Fatalf("the gRPC listener is a %T, want a *listener.Listener", ed.d.grpcLn)
	}
	if got := ln.SendTimeout(); got != server.DefaultSendTimeout {
		t.Errorf("the gRPC listener's send timeout is %v, want %v", got, server.DefaultSendTimeout)
	}
	// grpc-go sets its keepalive timeout as TCP_USER_TIMEOUT only on a
	// bare TCP listener's connections: the daemon's sets it itself.
	if got := ln.UserTimeout(); got != server.DefaultKeepaliveTimeout {
		t.Errorf("the gRPC listener's TCP_USER_TIMEOUT is %v, want the keepalive timeout %v", got, server.DefaultKeepaliveTimeout)
	}
}
