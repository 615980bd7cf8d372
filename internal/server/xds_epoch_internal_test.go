package server

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/descriptors"
)

// scriptedStream is an ADS stream whose server sends resps, then nothing
// until the stream ends; it keeps the requests sent on it.
type scriptedStream struct {
	grpc.ClientStream
	ctx   context.Context
	resps []*discovery.DiscoveryResponse
	sent  []*discovery.DiscoveryRequest
}

func (s *scriptedStream) Send(r *discovery.DiscoveryRequest) error {
	s.sent = append(s.sent, r)
	return nil
}

func (s *scriptedStream) Recv() (*discovery.DiscoveryResponse, error) {
	if len(s.resps) > 0 {
		r := s.resps[0]
		s.resps = s.resps[1:]
		return r, nil
	}
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

type scriptedADS struct {
	discovery.AggregatedDiscoveryServiceClient
	st *scriptedStream
}

func (a *scriptedADS) StreamAggregatedResources(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
	a.st.ctx = ctx
	return a.st, nil
}

// A refused response sent again waits up to Retry before it is NACKed
// again unread; if Epoch changes meanwhile (a reload turned
// merge_domains on), it is read and applied at the end of that wait, not
// NACKed once more with the old error.
func TestXDSRepeatAppliedWhenEpochChangesDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := anypb.New(&rlsconf.RateLimitConfig{Name: "a", Domain: "d"})
		if err != nil {
			t.Fatal(err)
		}
		resp := func(nonce string) *discovery.DiscoveryResponse {
			return &discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: XDSTypeURL, Nonce: nonce, Resources: []*anypb.Any{a}}
		}
		st := &scriptedStream{resps: []*discovery.DiscoveryResponse{resp("1"), resp("2")}}
		var epoch atomic.Uint64
		applies := 0
		c := &xdsClient{o: XDSOptions{Retry: time.Minute, Epoch: epoch.Load, Logger: slog.New(slog.DiscardHandler),
			Apply: func(string, []descriptors.Doc) error {
				applies++
				if epoch.Load() == 0 {
					return errors.New(`domain "d" is already configured`)
				}
				return nil
			}}, ads: &scriptedADS{st: st}, node: xdsNode(XDSOptions{NodeID: "n"})}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { c.run(ctx); close(done) }()
		synctest.Wait() // the repeat waits
		if applies != 1 || len(st.sent) != 2 {
			t.Fatalf("before the wait: %d applies, %d requests; want 1 and 2 (subscribe, NACK)", applies, len(st.sent))
		}
		epoch.Store(1)
		time.Sleep(time.Minute) // the bubble's clock: past the longest wait
		synctest.Wait()
		if applies != 2 {
			t.Errorf("Apply called %d times, want 2: the repeat read again once Epoch changed", applies)
		}
		if len(st.sent) != 3 {
			t.Fatalf("%d requests, want 3", len(st.sent))
		}
		if last := st.sent[2]; last.GetErrorDetail() != nil || last.GetVersionInfo() != "v1" || last.GetResponseNonce() != "2" {
			t.Errorf("answer to the repeat: version %q nonce %q error %v; want an ACK of v1, nonce 2", last.GetVersionInfo(), last.GetResponseNonce(), last.GetErrorDetail())
		}
		cancel()
		<-done
	})
}
