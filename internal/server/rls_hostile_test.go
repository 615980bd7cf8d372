package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/memstore"
)

// Requests as a client of the proxy can shape them: the descriptor values
// Envoy builds from its request (headers, path, address) are the
// client's bytes, as many as Envoy takes. A call Sluice fails is let
// through by Envoy's default failure_mode_deny: false, past every
// descriptor of the request, so that whatever a client can put in a value
// must be decided, not refused.

// envoyHeaderBytes is Envoy's default bound on a request's headers
// (max_request_headers_kb: 60): the largest value a client can have
// Envoy copy into a descriptor.
const envoyHeaderBytes = 60 << 10

// TestEnvoySizedRequestDecided: a route whose every rate limit carries
// the same header (MaxDescriptors of them) has Envoy send that header's
// value in each descriptor: with a 60 KiB value, 3.75 MiB. Such a request
// is decided, the route's global limit counted with it, where one past
// 1 MiB was refused with RESOURCE_EXHAUSTED (and so let through, its
// global limit uncounted); the reference service takes up to 4 MiB. A
// request past 4 MiB is still refused.
func TestEnvoySizedRequestDecided(t *testing.T) {
	e := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	big := make([]*descriptorPB, 0, server_MaxDescriptors)
	for i := range server_MaxDescriptors - 1 {
		big = append(big, desc("user", fmt.Sprintf("%02d", i)+strings.Repeat("v", envoyHeaderBytes-2)))
	}
	big = append(big, desc("global", "all"))
	r, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: big})
	if err != nil {
		t.Fatalf("%d descriptors of a 60 KiB value: %v, want an answer", len(big), err)
	}
	if want := "O:" + strings.Repeat("O", len(big)); codesOf(r) != want {
		t.Errorf("%d descriptors of a 60 KiB value: %s, want %s", len(big), codesOf(r), want)
	}
	if got := e.remaining(t, "web", "global", "all"); got != 99 {
		t.Errorf("global remaining after it = %d, want 99 (the request counted)", got)
	}
	_, err = e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web",
		Descriptors: []*descriptorPB{desc("user", strings.Repeat("x", 4<<20))}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 4 MiB value: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// BenchmarkEnvoySizedRequest is the cost of the largest request Envoy
// sends with its default header bound (TestEnvoySizedRequestDecided's,
// 3.75 MiB) over a real gRPC connection, on the memory store.
func BenchmarkEnvoySizedRequest(b *testing.B) {
	e := startRLS(b, memstore.New(memstore.Options{}), writeConf(b, "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"), envOpts{})
	req := &rlsv3.RateLimitRequest{Domain: "web"}
	for i := range server_MaxDescriptors {
		req.Descriptors = append(req.Descriptors, desc("user", fmt.Sprintf("%02d", i)+strings.Repeat("v", envoyHeaderBytes-2)))
	}
	b.SetBytes(int64(server_MaxDescriptors * envoyHeaderBytes))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.client.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
