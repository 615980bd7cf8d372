package proxy_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/proxy"
)

// An upgraded connection (a WebSocket) through which nothing passes for
// TunnelIdleTimeout is closed on both sides, on every HTTP/1.1 engine, and
// its max_connections slot given back; a tunnel in use is not (the
// timer's own test, tunnel_test.go, checks that traffic puts it off).
func TestEngineTunnelIdleTimeout(t *testing.T) {
	forEngine(t, true, func(t *testing.T, ec engineCase) {
		up := newEchoUpstream(t)
		s := startOn(t, ec, up.srv.URL, engineOpts{proxy: proxy.Options{TunnelIdleTimeout: 50 * time.Millisecond},
			lis: listener.Options{MaxConnections: 1}})
		c, br, resp := upgrade(t, s, "echo")
		if resp.StatusCode != 101 {
			t.Fatalf("upgrade: %d, want 101", resp.StatusCode)
		}
		echoes(t, c, br, "ping\n")
		// Nothing more is sent: the read ends when the proxy closes the
		// tunnel, or at the connection's safety deadline (dial) if never.
		b, err := io.ReadAll(br)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("an idle tunnel stayed open %v, well past its 50ms tunnel idle timeout", safety)
		}
		if len(b) != 0 {
			t.Errorf("idle tunnel closed: read %q, want nothing", b)
		}
		waitFor(t, up.ended, "the upstream's side of the idle tunnel to be closed")
		waitOpen(t, s.ln, 0)
	})
}
