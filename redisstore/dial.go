package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"

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
	return dialNoting(ctx, addr, d, tc, nil)
}

// handshakes notes the TLS handshakes of a Store's dials, so that New,
// giving up, can tell one that never got an answer: a plain Redis port
// reads a TLS client hello as the start of a command and waits for the
// rest, so the handshake hangs until the timeout, like a Redis that is
// down.
type handshakes struct {
	begun, ended atomic.Int64
	addr         atomic.Pointer[string] // of the last one begun
	// certAsked is the address of the last handshake done in which the
	// server asked for a client certificate: over TLS 1.3 a server that
	// refuses the certificate (or its absence) says so after the client's
	// side of the handshake, and its alert is lost when the client's
	// first write meets the closed connection (see refusedAfterHandshake).
	certAsked atomic.Pointer[string]
}

// askedCert returns the address of a handshake in which the server asked
// for a client certificate, or "".
func (h *handshakes) askedCert() string {
	if a := h.certAsked.Load(); a != nil {
		return *a
	}
	return ""
}

// noteCertRequest returns tc (a clone) with a GetClientCertificate that
// sets *asked when the server asks for a certificate, and answers as
// crypto/tls does without one: tc's own GetClientCertificate, else the
// first of tc.Certificates the server accepts, else none.
func noteCertRequest(tc *tls.Config, asked *bool) *tls.Config {
	tc = tc.Clone()
	get := tc.GetClientCertificate
	certs := tc.Certificates
	tc.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		*asked = true
		if get != nil {
			return get(cri)
		}
		for i := range certs {
			if cri.SupportsCertificate(&certs[i]) == nil {
				return &certs[i], nil
			}
		}
		return new(tls.Certificate), nil
	}
	return tc
}

// unanswered returns the address of a handshake begun and not ended, or "".
func (h *handshakes) unanswered() string {
	if a := h.addr.Load(); a != nil && h.begun.Load() > h.ended.Load() {
		return *a
	}
	return ""
}

// dialer is dial, noting its handshakes in h.
func (h *handshakes) dialer() func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		return dialNoting(ctx, addr, d, tc, h)
	}
}

// withTLSFunc returns dial, dialling with the TLS configuration of
// o.TLSFunc at each dial when set (see Options.TLSFunc).
func withTLSFunc(dial func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error), o Options) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	if o.TLS == nil || o.TLSFunc == nil {
		return dial
	}
	return func(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		if tc != nil {
			if c := o.TLSFunc(); c != nil {
				tc = c
			}
		}
		return dial(ctx, addr, d, tc)
	}
}

func dialNoting(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config, h *handshakes) (net.Conn, error) {
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
	var asked bool
	if h != nil {
		tc = noteCertRequest(tc, &asked)
		h.addr.Store(&addr)
		h.begun.Add(1)
		defer h.ended.Add(1)
	}
	t := tls.Client(c, tc)
	if err := t.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	if asked {
		h.certAsked.Store(&addr)
	}
	return t, nil
}
