package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestConnectionsOpenReturnsToZero: sluice_connections_open follows the
// connections, whatever their end. Every listener gets connections that
// end each way a client can end them — after keep-alive requests, after a
// body the plaintext front hands to net/http, with garbage the server
// refuses, half a request and a hang-up, a tunnel through the proxy (an
// Upgrade), gRPC calls, garbage on the gRPC port —
// and the gauge shows exactly those held, and comes back to 0 on each
// once all are closed.
func TestConnectionsOpenReturnsToZero(t *testing.T) {
	up := startCountingUpstream(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: %s}
grpc: {listen: 127.0.0.1:0, config: [rl.yaml]}
rules:
  - name: r
    rate: 1000/s
`, up.url)), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	api := strings.TrimPrefix(td.api, "http://")
	proxy := strings.TrimPrefix(td.proxy, "http://")
	grpcAddr := td.d.Addrs().GRPC
	open := func(listener string) float64 { return td.metric("sluice_connections_open", "listener", listener) }

	var held []net.Conn
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		return c
	}
	answer := func(c net.Conn, req string) string {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(safety))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%.40q: %v", req, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Status
	}
	for _, addr := range []string{api, proxy} {
		for range 3 { // keep-alive: two requests
			c := dial(addr)
			answer(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			answer(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 22\r\n\r\n{\"rule\":\"r\",\"key\":\"k\"}")
		}
		for range 3 { // a chunked body, which the plaintext front hands to net/http (and the server closes after)
			answer(dial(addr), "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n13\r\n{\"rule\":\"r\",\"key\":\"\r\n3\r\nk\"}\r\n0\r\n\r\n")
		}
		for range 3 { // garbage, refused by the server
			io.WriteString(dial(addr), "NOT HTTP AT ALL\r\n\r\n")
		}
		for range 3 { // half a request, then silence
			io.WriteString(dial(addr), "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		}
	}
	for range 2 { // tunnels through the proxy
		c := dial(proxy)
		if st := answer(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); !strings.HasPrefix(st, "101") {
			t.Fatalf("Upgrade through the proxy: %s, want 101", st)
		}
	}
	var grpcConns []*grpc.ClientConn
	for range 3 { // gRPC calls on their own connections
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), safety)
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: nil})
		cancel()
		if err == nil {
			t.Fatal("ShouldRateLimit without descriptors: no error")
		}
		grpcConns = append(grpcConns, conn)
	}
	for range 2 { // garbage on the gRPC port
		io.WriteString(dial(grpcAddr), "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	// Held: on api, the keep-alive and half-request ones; on the proxy,
	// those and the tunnels; on grpc, the clients' connections.
	waitFor(t, "the connections held counted", func() bool {
		return open("api") == 6 && open("proxy") == 8 && open("grpc") == 3
	})
	for _, c := range held {
		c.Close()
	}
	for _, c := range grpcConns {
		c.Close()
	}
	// The tunnels' upstream side ends once their client has gone.
	for range 2 {
		select {
		case <-up.ended:
		case <-time.After(safety):
			t.Fatal("a tunnel's upstream side did not end after its client closed")
		}
	}
	for _, l := range []string{"api", "proxy", "grpc"} {
		waitFor(t, l+": sluice_connections_open back to 0", func() bool { return open(l) == 0 })
	}
}
