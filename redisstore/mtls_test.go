package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// A Redis with tls-auth-clients yes refuses a client without a
// certificate, or with one of another CA: over TLS 1.3 its alert comes
// after the client's side of the handshake, with the first read. New
// fails with ErrTLS every time (a refusal, which waiting does not mend),
// not as a Redis that does not answer; with a certificate of its CA it
// connects.
func TestNewMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Server(t)
	rs := redistest.StartMTLSServer(t, srv.CertFile, srv.KeyFile, ca.File)
	newWith := func(certs ...tls.Certificate) (*Store, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return New(ctx, Options{Addrs: []string{rs.TLSAddr}, TLS: ca.ClientConfig(certs...), Timeout: 2 * time.Second})
	}
	stranger := tlstest.NewCA(t, "other-ca").Client(t, "stranger", []string{"stranger"})
	for i := range 5 {
		for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "another CA's": {stranger.TLS}} {
			s, err := newWith(certs...)
			if err == nil {
				s.Close()
				t.Fatalf("%s (try %d): connected", name, i)
			}
			if !errors.Is(err, ErrTLS) || !TLSRefusedByRedis(err) {
				t.Fatalf("%s (try %d): %v, want ErrTLS refused by Redis", name, i, err)
			}
		}
	}
	other := tlstest.NewCA(t, "other-ca-2")
	if _, err := New(context.Background(), Options{Addrs: []string{rs.TLSAddr}, TLS: other.ClientConfig(), Timeout: 2 * time.Second}); !errors.Is(err, ErrTLS) || TLSRefusedByRedis(err) {
		t.Errorf("Redis's certificate not trusted: %v, want ErrTLS, not refused by Redis", err)
	}
	s, err := newWith(ca.Client(t, "sluice", []string{"sluice"}).TLS)
	if err != nil {
		t.Fatalf("with a client certificate of Redis's CA: %v", err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Options.TLSFunc gives each connection its TLS as it is dialled: New's
// presents the certificate it returns then (TLS has none, which Redis
// would refuse), and a reconnection the one it returns by then.
func TestTLSFuncPerConnection(t *testing.T) {
	ca := tlstest.NewCA(t, "redis-ca")
	srv := ca.Server(t)
	rs := redistest.StartMTLSServer(t, srv.CertFile, srv.KeyFile, ca.File)
	var cur atomic.Pointer[tls.Config]
	cur.Store(ca.ClientConfig(ca.Client(t, "sluice", []string{"sluice"}).TLS))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := New(ctx, Options{Addrs: []string{rs.TLSAddr}, TLS: ca.ClientConfig(), TLSFunc: cur.Load, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New with TLSFunc's client certificate: %v", err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// Now a configuration without a certificate: the connections made
	// from then on are refused by Redis.
	cur.Store(ca.ClientConfig())
	if n, err := redistest.Do(rs.Addr, "CLIENT", "KILL", "TYPE", "normal"); err != nil || n == "0" {
		t.Fatalf("CLIENT KILL TYPE normal: %q, %v", n, err)
	}
	deadline := time.Now().Add(30 * time.Second) // a failure's bound, not a synchronisation
	for s.Ping(context.Background()) == nil {
		if time.Now().After(deadline) {
			t.Fatal("reconnections without a client certificate still answer: TLSFunc not used when redialling")
		}
	}
}
