package redisstore

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/sluicehq/sluice/internal/rawio"
)

// dial connects to one Redis node as rueidis would (TCP, then TLS when
// tc is set), with the TCP connection's reads and writes raw (package
// rawio): a call's write to Redis and its read of the answer then never
// put the goroutine's thread in the runtime's system-call state. Through
// net.Conn they did, on every script call, so the runtime's monitor
// thread (sysmon) kept waking every 20 µs to take the processor of a
// thread still in its system call and hand it to another; profiled under
// gRPC load on Redis (docs/bench-envoy.md) that monitor was ~8% of the
// daemon's CPU. Deadlines and Close behave as on the plain connection.
func dial(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c = rawio.Wrap(c)
	if tc == nil {
		return c, nil
	}
	// As tls.Dialer: the server's name from the address unless set.
	if tc.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		tc = tc.Clone()
		tc.ServerName = host
	}
	t := tls.Client(c, tc)
	if err := t.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}
