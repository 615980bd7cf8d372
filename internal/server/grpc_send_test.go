package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
	"github.com/sluicehq/sluice/memstore"
)

// dialSmallBuffer connects to addr with a receive buffer of a few KB,
// which a client that reads nothing fills at once.
func dialSmallBuffer(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// smallSendBuffer is a listener whose accepted TCP sockets have a send
// buffer of 4 KiB, without the kernel's autotuning.
type smallSendBuffer struct{ net.Listener }

func (l smallSendBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.SetWriteBuffer(4 << 10); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, err
}

// TestGRPCStalledReaderCut: a client that stops reading its socket
// altogether, while it grants all the window there is and goes on
// sending calls, is cut once the server's writes make no progress for
// the listener's send timeout, and counted slow. Without it the answers
// the socket does not take wait in grpc-go's queue, before the wire,
// where the flow-control account (MaxUnreadAnswers) never sees them:
// measured, 3.7 MB of heap and 4 goroutines a connection, until
// keepalive ends it some 40 s later (or, with a client that keeps the
// server reading, the connection's age, 5 min and 30 s of grace).
func TestGRPCStalledReaderCut(t *testing.T) {
	ca := tlstest.NewCA(t, "server")
	t.Run("plaintext", func(t *testing.T) { stalledReaderCut(t, nil) })
	t.Run("TLS", func(t *testing.T) { stalledReaderCut(t, ca) })
}

// stalledReaderCut runs TestGRPCStalledReaderCut, over TLS with a
// certificate of ca unless it is nil.
func stalledReaderCut(t *testing.T, ca *tlstest.CA) {
	const send = 200 * time.Millisecond
	// Keepalive would end the connection too, some 40 s on: not within
	// the test.
	o := server.GRPCOptions{MaxCalls: 10_000, KeepaliveTime: time.Hour}
	if ca != nil {
		o.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS}}
	}
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{
		grpc: o,
		listen: func(ln net.Listener, m *metrics.Metrics) net.Listener {
			// As the daemon wraps it, over accepted sockets with a small
			// send buffer: the stall then comes after hundreds of
			// answers, not after the megabytes the kernel's autotuned
			// buffer holds (some 58,000 calls, which took most of a
			// minute under -race on a loaded machine).
			return listener.Wrap(smallSendBuffer{ln}, 0, send, m.Listener("grpc"))
		},
	})
	c := dialSmallBuffer(t, env.conn.Target())
	c.SetDeadline(time.Now().Add(5 * time.Minute)) // a hang guard, not a measure
	if ca != nil {
		cfg := ca.ClientConfig()
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		c = tc
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, nil) // reads nothing, ever
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	block := callBlock()
	body := requestBody(t)
	start := time.Now()
	calls := 0
	var err error
	for id := uint32(1); err == nil; id += 2 {
		if err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err == nil {
			err = fr.WriteData(id, true, body)
			calls++
		}
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("after %v of calls (%d) on a connection whose client reads nothing, the server still holds it", time.Since(start).Round(time.Second), calls)
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("calls on a connection whose client reads nothing: %v, want the server's closing it", err)
	}
	answered := envoyHits(t, env)
	t.Logf("%d calls sent, %v answered, before the server closed the connection %v after the first (send timeout %v)",
		calls, answered, time.Since(start).Round(time.Millisecond), send)
	if answered == 0 {
		t.Error("the server closed the connection before answering a call: nothing stalled")
	}
	m := metricstest.Gather(t, env.reg)
	if got := m[`sluice_connections_closed_slow_total{listener="grpc"}`]; got != 1 {
		t.Errorf("sluice_connections_closed_slow_total{listener=grpc} = %v, want 1", got)
	}
	if got := env.grpc.ClosedUnread(); got != 0 {
		t.Errorf("ClosedUnread() = %d, want 0: the client granted all the window", got)
	}
	if ca != nil {
		return // env.client speaks plaintext
	}
	// A client that reads its answers is served on, under the same
	// send timeout.
	req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("user", "reader")}}
	for range 100 {
		if _, err := env.client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatalf("a client that reads: %v", err)
		}
	}
}
