package server

import (
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// BenchmarkRLSCodecUnmarshal is the codec's cost to read a request as
// Envoy sends one: a domain and three descriptors of one to three entries
// (a header's value, the client's address, the path).
func BenchmarkRLSCodecUnmarshal(b *testing.B) {
	e := func(k, v string) *commonv3.RateLimitDescriptor_Entry {
		return &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge-proxy", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{e("generic_key", "api"), e("remote_address", "203.0.113.7")}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{e("api_key", "k_4f1c2a9e7b3d4c58a1e6f0b2d9c87a31")}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{e("tenant", "acme-corporation"), e("method", "POST"), e("path", "/v1/orders/12345/items?expand=price")}},
	}}
	msg, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	c := newRLSCodec()
	data := mem.BufferSlice{mem.SliceBuffer(msg)}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		var r rlsv3.RateLimitRequest
		if err := c.Unmarshal(data, &r); err != nil {
			b.Fatal(err)
		}
	}
}
