package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestDroppedClientsLeaveNothing: clients that go away mid-request — an
// HTTP/1 body cut short through the proxy, a POST whose client hangs up
// while the upstream holds it, an HTTP/2 request over TLS whose body
// stalls and is cancelled, a gRPC connection closed after a call, one
// closed mid-preface — leave no goroutine or descriptor behind, and the
// upstream's request held for a client gone is cancelled.
func TestDroppedClientsLeaveNothing(t *testing.T) {
	var active atomic.Int64
	up := newUpstreamFunc(t, func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		io.Copy(io.Discard, r.Body)
		if strings.HasPrefix(r.URL.Path, "/hold") {
			<-r.Context().Done() // until the proxy lets go of it
			return
		}
		io.WriteString(w, "ok")
	})
	ca := tlstest.NewCA(t, "server")
	pair := ca.Server(t)
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "ratelimit.yaml"), envoyDescriptors)
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, `listen: 127.0.0.1:0
api: {tls: {cert: `+pair.CertFile+`, key: `+pair.KeyFile+`}}
proxy: {listen: 127.0.0.1:0, upstream: `+up+`}
grpc: {listen: 127.0.0.1:0, config: [ratelimit.yaml]}
rules:
  - {name: all, rate: 100000/m}
`)
	td := startDaemonFile(t, path)
	a := td.d.Addrs()
	// The HTTP/2 client's connections, closed by the test: the transport
	// keeps one whose cancelled stream it is still resetting, which the
	// daemon then holds for as long as the client does (idle_timeout).
	var h2conns []net.Conn
	h2cfg := ca.ClientConfig()
	h2cfg.NextProtos = []string{"h2"}
	h2 := &http.Transport{TLSClientConfig: h2cfg, ForceAttemptHTTP2: true,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&tls.Dialer{Config: h2cfg}).DialContext(ctx, network, addr)
			if err == nil {
				if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
					t.Errorf("TLS to the decision API negotiated %q, want h2", p)
				}
				h2conns = append(h2conns, c)
			}
			return c, err
		}}
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	round := func() {
		c := dial(a.Proxy)
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
		c.Close()

		c = dial(a.Proxy)
		fmt.Fprintf(c, "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
		waitFor(t, "the request held at the upstream", func() bool { return active.Load() > 0 })
		c.Close()
		waitFor(t, "the upstream's request cancelled after the client hung up", func() bool { return active.Load() == 0 })

		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+a.API+"/v1/check", pr)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			if resp, err := h2.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
			close(done)
		}()
		pw.Write([]byte(`{"rule":`))
		cancel()
		pw.Close()
		<-done
		for _, c := range h2conns {
			c.Close()
		}
		h2conns = nil

		conn, err := grpc.NewClient(a.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shop"})
		conn.Close()

		c = dial(a.GRPC)
		io.WriteString(c, "PRI * HTTP/2.0\r\n")
		c.Close()
	}
	for range 3 {
		round()
	}
	g, fds := runtime.NumGoroutine(), openFDs(t)
	for range 30 {
		round()
	}
	settled(t, "after 30 more rounds of clients gone mid-request", g, fds)
}
