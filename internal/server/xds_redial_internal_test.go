package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// A server that refuses the client certificate (expired, revoked) makes
// the subscription fail, and wait up to Retry (here 10 minutes) before
// it tries again; Redial, with the certificate rotated, makes it again
// at once over a connection presenting the new one.
func TestXDSRedialEndsOutageAtOnce(t *testing.T) {
	ca := tlstest.NewCA(t, "xds-ca")
	old, next := ca.Client(t, "old", []string{"sluice"}), ca.Client(t, "next", []string{"sluice"})
	refused := make(chan struct{}, 100)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acks := make(chan string, 100)
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		if r.GetResponseNonce() != "" && r.GetErrorDetail() == nil {
			acks <- r.GetVersionInfo()
		}
		return nil
	}}
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.Server(t).TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.PeerCertificates[0].Subject.CommonName == "old" {
				refused <- struct{}{}
				return errors.New("certificate revoked")
			}
			return nil
		},
	})))
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(context.Background(), cache, cb))
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	snap, err := cachev3.NewSnapshot("v1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: {&rlsconf.RateLimitConfig{Name: "a", Domain: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(context.Background(), "n", snap); err != nil {
		t.Fatal(err)
	}

	var cert atomic.Pointer[tls.Certificate]
	cert.Store(&old.TLS)
	redial := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	broken := make(chan struct{}, 100)
	log := slog.New(slog.NewTextHandler(lineFunc(func(line string) {
		if strings.Contains(line, "subscription broken") {
			broken <- struct{}{}
		}
	}), nil))
	go func() {
		done <- RunXDS(ctx, XDSOptions{Server: ln.Addr().String(), NodeID: "n", Retry: 10 * time.Minute, Redial: redial, Logger: log,
			TLS: func() *tls.Config {
				return &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{*cert.Load()}, MinVersion: tls.VersionTLS12}
			},
			Apply: func(string, []descriptors.Doc) error { return nil }})
	}()
	bound := time.NewTimer(30 * time.Second) // a failure's bound, far below Retry
	defer bound.Stop()
	select {
	case <-refused:
	case <-bound.C:
		t.Fatal("the server saw no connection with the old certificate")
	}
	select { // the subscription waits for Retry now
	case <-broken:
	case <-bound.C:
		t.Fatal("the subscription refused was not logged broken")
	}
	cert.Store(&next.TLS)
	redial <- struct{}{}
	select {
	case v := <-acks:
		if v != "v1" {
			t.Errorf("ACK of %q, want v1", v)
		}
	case <-bound.C:
		t.Fatal("no ACK within 30s of Redial: the subscription waited for Retry (10m) rather than being made again at once")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunXDS: %v", err)
	}
}

// lineFunc is a writer that hands each write (a log line) to a func.
type lineFunc func(string)

func (f lineFunc) Write(p []byte) (int, error) { f(string(p)); return len(p), nil }
