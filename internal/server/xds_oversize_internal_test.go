package server

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/descriptors"
)

// oversizeADS answers the first stream with v1, takes its ACK and goes
// away; the next two streams it answers with v2, a response over the
// client's limit; the later ones it holds open unanswered. It sends each
// request it receives to reqs.
type oversizeADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	streams atomic.Int64
	reqs    chan *discovery.DiscoveryRequest
	v1, v2  *discovery.DiscoveryResponse
}

func (s *oversizeADS) StreamAggregatedResources(st grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	n := s.streams.Add(1)
	r, err := st.Recv()
	if err != nil {
		return err
	}
	s.reqs <- r
	switch n {
	case 1:
		if err := st.Send(s.v1); err != nil {
			return err
		}
		if r, err = st.Recv(); err != nil {
			return err
		}
		s.reqs <- r
		return status.Error(codes.Unavailable, "going away")
	case 2, 3:
		if err := st.Send(s.v2); err != nil {
			return err
		}
		_, err := st.Recv() // until the client drops the stream
		return err
	default:
		<-st.Context().Done()
		return nil
	}
}

// A response over the 64 MiB limit is refused by gRPC before it is read:
// it cannot be NACKed (its nonce is in it), nor applied; the stream ends
// and is made again, with the version in force. It is logged at ERROR,
// naming the limit, even when the stream had broken before (the server
// away, then back with a config too large).
func TestXDSOversizeResponse(t *testing.T) {
	a, err := anypb.New(&rlsconf.RateLimitConfig{Name: "a", Domain: "d"})
	if err != nil {
		t.Fatal(err)
	}
	ads := &oversizeADS{reqs: make(chan *discovery.DiscoveryRequest, 100),
		v1: &discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: XDSTypeURL, Nonce: "1", Resources: []*anypb.Any{a}},
		v2: &discovery.DiscoveryResponse{VersionInfo: "v2", TypeUrl: XDSTypeURL, Nonce: "2",
			Resources: []*anypb.Any{{TypeUrl: XDSTypeURL, Value: make([]byte, xdsMaxMessage)}}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, ads)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lineFunc(func(line string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(line)
	}), nil))
	var applied []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunXDS(ctx, XDSOptions{Server: ln.Addr().String(), NodeID: "n", Retry: time.Millisecond, Logger: log,
			Apply: func(v string, _ []descriptors.Doc) error { applied = append(applied, v); return nil }})
	}()
	bound := time.NewTimer(60 * time.Second) // a failure's bound
	defer bound.Stop()
	var reqs []*discovery.DiscoveryRequest
	for len(reqs) < 4 {
		select {
		case r := <-ads.reqs:
			reqs = append(reqs, r)
		case <-bound.C:
			t.Fatalf("the server received %d requests, want 4 (subscribe, ACK v1, subscribe after the break, after the response too large)", len(reqs))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunXDS: %v", err)
	}
	if len(applied) != 1 || applied[0] != "v1" {
		t.Errorf("applied %q, want v1 only", applied)
	}
	for i, r := range reqs[2:] {
		if r.GetResponseNonce() != "" || r.GetVersionInfo() != "v1" || r.GetErrorDetail() != nil {
			t.Errorf("subscription %d after the break: nonce %q version %q error %v, want a new subscription holding v1", i+2, r.GetResponseNonce(), r.GetVersionInfo(), r.GetErrorDetail())
		}
	}
	mu.Lock()
	text := logs.String()
	mu.Unlock()
	if n := strings.Count(text, "level=ERROR msg=\"xDS response over the 64 MiB limit"); n != 1 {
		t.Errorf("the response too large logged %d times at ERROR naming the limit, want once:\n%s", n, text)
	}
}
