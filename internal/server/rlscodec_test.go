package server

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func codecResponses() []*rlsv3.RateLimitResponse {
	st := func(code rlsv3.RateLimitResponse_Code, name string, rpu, rem uint32, d time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code,
			CurrentLimit:   &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
			LimitRemaining: rem, DurationUntilReset: durationpb.New(d)}
	}
	return []*rlsv3.RateLimitResponse{
		{},
		{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}},
		{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}}},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			st(rlsv3.RateLimitResponse_OK, "", 1_000_000_000, 999_999_999, 1500*time.Microsecond),
			st(rlsv3.RateLimitResponse_OVER_LIMIT, "per-user ☃", 10, 0, 59*time.Second+time.Nanosecond),
			{Code: rlsv3.RateLimitResponse_OK, DurationUntilReset: &durationpb.Duration{}},
		}, ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit-Limit", Value: "10"}, {Key: "Retry-After", Value: "59"}, {Key: "", Value: ""}, {Key: "raw", RawValue: []byte{0, 1}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{st(rlsv3.RateLimitResponse_OK, "x", 1, 1, 365*24*time.Hour)}},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, UnitMultiplier: wrapperspb.UInt32(10)}, DurationUntilReset: durationpb.New(570 * time.Second)},
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(0)}},
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "n", UnitMultiplier: wrapperspb.UInt32(math.MaxUint32)}},
		}},
	}
}

// The codec writes exactly protobuf's bytes.
func TestRLSCodecResponseIsProtobufs(t *testing.T) {
	c := newRLSCodec()
	for i, r := range codecResponses() {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendResponse(nil, r)
		if !ok {
			t.Fatalf("response %d: appendResponse refused it", i)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("response %d:\n got %x\nwant %x", i, got, want)
		}
		bs, err := c.Marshal(r)
		if err != nil || !bytes.Equal(bs.Materialize(), want) {
			t.Errorf("response %d: codec Marshal = %x, %v", i, bs.Materialize(), err)
		}
	}
	// What it does not write goes to protobuf.
	q := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, RawBody: []byte("x"), Quota: &rlsv3.RateLimitResponse_Quota{Requests: 3}}
	if _, ok := appendResponse(nil, q); ok {
		t.Error("appendResponse wrote a response with a quota and a raw body")
	}
	bs, err := c.Marshal(q)
	var back rlsv3.RateLimitResponse
	if err != nil || proto.Unmarshal(bs.Materialize(), &back) != nil || !proto.Equal(&back, q) {
		t.Errorf("fallback Marshal: %v, round trip %v", err, &back)
	}
}

func codecRequests() []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{
		{},
		{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "key", Value: "k1"}}}}},
		{Domain: "édge", HitsAddend: 7, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "a", Value: ""}, {Key: "", Value: "b"}, {}}},
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: strings.Repeat("u", 300)}},
				Limit:      &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(3)},
				HitsAddend: wrapperspb.UInt64(0), IsNegativeHits: true},
			{HitsAddend: wrapperspb.UInt64(math.MaxUint64), Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{}},
		}},
	}
}

// stripUnknown removes the unknown fields protobuf keeps (the codec drops
// them), recursively.
func stripUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				stripUnknown(v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			stripUnknown(v.Message())
		}
		return true
	})
}

// checkDecode asserts the codec reads b as protobuf does: both fail, or
// both read the same request.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	var want rlsv3.RateLimitRequest
	werr := proto.Unmarshal(b, &want)
	var got rlsv3.RateLimitRequest
	gerr := newRLSCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))}, &got)
	if gerr == nil && tooMany(&got) {
		// Past the bounds the codec skips the rest (malformed or not),
		// and the request is refused for its number.
		if werr == nil && !tooMany(&want) {
			t.Fatalf("%x: the codec read more descriptors or entries than protobuf: %v, protobuf %v", b, &got, &want)
		}
		return
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%x: protobuf says %v, the codec %v", b, werr, gerr)
	}
	if werr != nil {
		return
	}
	stripUnknown(want.ProtoReflect())
	if !proto.Equal(&got, &want) {
		t.Fatalf("%x: codec read %v, protobuf %v", b, &got, &want)
	}
}

// tooMany reports whether r has more descriptors, or a descriptor more
// entries, than a request may (validate).
func tooMany(r *rlsv3.RateLimitRequest) bool {
	if len(r.Descriptors) > MaxDescriptors {
		return true
	}
	for _, d := range r.Descriptors {
		if len(d.Entries) > MaxEntries {
			return true
		}
	}
	return false
}

func TestRLSCodecRequestIsProtobufs(t *testing.T) {
	var all []byte
	for _, r := range codecRequests() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, b)
		all = append(all, b...)
	}
	checkDecode(t, all) // concatenated: scalars' last value wins, messages merge
	// A message split over several buffers reads the same.
	var got rlsv3.RateLimitRequest
	split := mem.BufferSlice{mem.SliceBuffer(bytes.Clone(all[:7])), mem.SliceBuffer(bytes.Clone(all[7:]))}
	var want rlsv3.RateLimitRequest
	if err := newRLSCodec().Unmarshal(split, &got); err != nil || proto.Unmarshal(all, &want) != nil || !proto.Equal(&got, &want) {
		t.Errorf("split message: %v, read %v, want %v", err, &got, &want)
	}
	for _, bad := range [][]byte{
		{0x0a, 0x02, 0xff, 0xfe},             // domain not UTF-8
		{0x0a, 0x05, 'a'},                    // truncated
		{0x12, 0x04, 0x0a, 0x02, 0x0a, 0x01}, // entry key truncated inside
		{0x00, 0x01},                         // field number 0
		{0x18, 0x80},                         // varint cut
		{0x1a, 0x01, 0x01},                   // hits_addend as bytes: unknown, skipped
		{0x08, 0x05},                         // domain as a varint: unknown, skipped
		{0x0c},                               // end group alone
		{0x12, 0x06, 0x22, 0x01, 0x02, 0x20, 0x01}, // mixed unknown inside a descriptor
	} {
		checkDecode(t, bad)
	}
}

// Other messages (health, reflection) go through protobuf.
func TestRLSCodecFallback(t *testing.T) {
	c := newRLSCodec()
	in := &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"}
	bs, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out healthpb.HealthCheckRequest
	if err := c.Unmarshal(bs, &out); err != nil || out.Service != in.Service {
		t.Errorf("health request through the codec: %v, %q", err, out.Service)
	}
	if c.Name() != "proto" {
		t.Errorf("Name = %q, want proto (the content-subtype clients send)", c.Name())
	}
}

func FuzzRLSCodecRequest(f *testing.F) {
	for _, r := range codecRequests() {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
	})
}
