package server

import (
	"context"
	"errors"
	"net"
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

	"github.com/sluicehq/sluice/internal/descriptors"
)

// A refused response the server sends again (go-control-plane's snapshot
// cache answers every NACK with it) is recognised by its bytes and NACKed
// without being read again: reading a large one (a 1.8 MB RateLimitConfig
// of 100,000 descriptors took 0.5 to 2.8 s) after every NACK kept a core
// busy for as long as the server held it.
func TestXDSRefusedNotReadAgain(t *testing.T) {
	serialHooks(t) // it sets decode
	var reads atomic.Int64
	orig := decode
	decode = func(r *discovery.DiscoveryResponse) ([]descriptors.Doc, error) {
		reads.Add(1)
		return orig(r)
	}
	t.Cleanup(func() { decode = orig })

	nacks := make(chan struct{}, 100)
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		if r.GetErrorDetail() != nil {
			nacks <- struct{}{}
		}
		return nil
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(context.Background(), cache, cb))
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	// Two resources: the server sends them in any order.
	snap, err := cachev3.NewSnapshot("v1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: {
		&rlsconf.RateLimitConfig{Name: "a", Domain: "d"}, &rlsconf.RateLimitConfig{Name: "b", Domain: "e"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(context.Background(), "n", snap); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var applied atomic.Int64
	go func() {
		done <- RunXDS(ctx, XDSOptions{Server: ln.Addr().String(), NodeID: "n", Retry: time.Millisecond,
			Apply: func(string, []descriptors.Doc) error { applied.Add(1); return errors.New("refused") }})
	}()
	for i := range 5 {
		select {
		case <-nacks:
		case <-time.After(30 * time.Second): // a failure's bound
			t.Fatalf("NACK %d not received", i+1)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunXDS: %v", err)
	}
	if n := applied.Load(); n != 1 {
		t.Errorf("Apply called %d times over 5 NACKs of one response, want 1", n)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the response read %d times over 5 NACKs, want once", n)
	}
}

// serialHooks makes t fail at once if it runs in parallel with other
// tests (t.Setenv panics in a test that called t.Parallel, and
// t.Parallel after it): the package variables it is about to set
// (decode, xdsRand) are read by every test of the package.
func serialHooks(t testing.TB) {
	t.Setenv("SLUICE_TEST_PACKAGE_HOOKS", t.Name())
}
