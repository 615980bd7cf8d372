package server

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
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

// checkDecode asserts the codec reads b as protobuf does, but for strings
// that are not UTF-8, which it takes as they are where protobuf refuses
// the message. Its oracle is protobuf reading b as a mirror of the
// request whose strings are repeated bytes (mirrorRequest): it fails
// where the codec fails, and reads what the codec reads (each string the
// last of its values). protobuf's own reading then differs from it
// exactly where a string of b, any of its values, is not UTF-8: protobuf
// then fails, naming UTF-8; else it reads the same request.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	mirror := dynamicpb.NewMessage(mirrorRequest)
	merr := proto.Unmarshal(b, mirror)
	var want *rlsv3.RateLimitRequest
	notUTF8 := false
	if merr == nil {
		want, notUTF8 = fromMirror(mirror)
	}
	var got rlsv3.RateLimitRequest
	gerr := newRLSCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))}, &got)
	var pb rlsv3.RateLimitRequest
	perr := proto.Unmarshal(b, &pb)
	switch {
	case merr != nil && perr == nil:
		t.Fatalf("%x: protobuf read what the mirror could not: %v (%v)", b, &pb, merr)
	case merr == nil && notUTF8 && (perr == nil || !strings.Contains(perr.Error(), "UTF-8")):
		t.Fatalf("%x: a string not UTF-8, and protobuf says %v, want it refused for its UTF-8", b, perr)
	case merr == nil && !notUTF8:
		if perr != nil {
			t.Fatalf("%x: every string UTF-8, and protobuf says %v", b, perr)
		}
		stripUnknown(pb.ProtoReflect())
		if !proto.Equal(&pb, want) {
			t.Fatalf("%x: protobuf read %v, the mirror %v", b, &pb, want)
		}
	}
	if gerr == nil && tooMany(&got) {
		// Past the bounds the codec skips the rest (malformed or not),
		// and the request is refused for its number.
		if merr == nil && !tooMany(want) {
			t.Fatalf("%x: the codec read more descriptors or entries than protobuf: %v, protobuf %v", b, &got, want)
		}
		return
	}
	if (merr == nil) != (gerr == nil) {
		t.Fatalf("%x: protobuf (strings as bytes) says %v, the codec %v", b, merr, gerr)
	}
	if merr == nil && !proto.Equal(&got, want) {
		t.Fatalf("%x: codec read %v, protobuf (strings as bytes) %v", b, &got, want)
	}
}

// mirrorRequest is RateLimitRequest with its messages, each string a
// repeated bytes field (so that every value of it is kept, the last
// being the string's), wrappers as messages of one field, the unit an
// int32 (an open enum reads as one).
var mirrorRequest = func() protoreflect.MessageDescriptor {
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, repeated bool, msg string) *descriptorpb.FieldDescriptorProto {
		l := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if repeated {
			l = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		}
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(), Label: l.Enum(), JsonName: proto.String(name)}
		if msg != "" {
			f.TypeName = proto.String(".mirror." + msg)
		}
		return f
	}
	const (
		bytesT = descriptorpb.FieldDescriptorProto_TYPE_BYTES
		msgT   = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
		u32    = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		u64    = descriptorpb.FieldDescriptorProto_TYPE_UINT64
		i32    = descriptorpb.FieldDescriptorProto_TYPE_INT32
		boolT  = descriptorpb.FieldDescriptorProto_TYPE_BOOL
	)
	msg := func(name string, fs ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fs}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("mirror.proto"), Package: proto.String("mirror"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			msg("Request", field("domain", 1, bytesT, true, ""), field("descriptors", 2, msgT, true, "Descriptor"), field("hits_addend", 3, u32, false, "")),
			msg("Descriptor", field("entries", 1, msgT, true, "Entry"), field("limit", 2, msgT, false, "Override"),
				field("hits_addend", 3, msgT, false, "U64"), field("is_negative_hits", 4, boolT, false, "")),
			msg("Entry", field("key", 1, bytesT, true, ""), field("value", 2, bytesT, true, "")),
			msg("Override", field("requests_per_unit", 1, u32, false, ""), field("unit", 2, i32, false, ""), field("unit_multiplier", 3, msgT, false, "U32")),
			msg("U64", field("value", 1, u64, false, "")),
			msg("U32", field("value", 1, u32, false, "")),
		},
	}, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().ByName("Request")
}()

// fromMirror returns the request m (a mirrorRequest) holds, and whether
// any value of its strings is not UTF-8.
func fromMirror(m protoreflect.Message) (*rlsv3.RateLimitRequest, bool) {
	notUTF8 := false
	last := func(m protoreflect.Message, num protoreflect.FieldNumber) string {
		l := m.Get(m.Descriptor().Fields().ByNumber(num)).List()
		s := ""
		for i := range l.Len() {
			s = string(l.Get(i).Bytes())
			notUTF8 = notUTF8 || !utf8.ValidString(s)
		}
		return s
	}
	get := func(m protoreflect.Message, num protoreflect.FieldNumber) protoreflect.Value {
		return m.Get(m.Descriptor().Fields().ByNumber(num))
	}
	has := func(m protoreflect.Message, num protoreflect.FieldNumber) bool {
		return m.Has(m.Descriptor().Fields().ByNumber(num))
	}
	r := &rlsv3.RateLimitRequest{Domain: last(m, 1), HitsAddend: uint32(get(m, 3).Uint())}
	ds := get(m, 2).List()
	for i := range ds.Len() {
		dm := ds.Get(i).Message()
		d := &commonv3.RateLimitDescriptor{IsNegativeHits: get(dm, 4).Bool()}
		es := get(dm, 1).List()
		for j := range es.Len() {
			em := es.Get(j).Message()
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: last(em, 1), Value: last(em, 2)})
		}
		if has(dm, 2) {
			om := get(dm, 2).Message()
			d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(get(om, 1).Uint()), Unit: typev3.RateLimitUnit(get(om, 2).Int())}
			if has(om, 3) {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(get(get(om, 3).Message(), 1).Uint()))
			}
		}
		if has(dm, 3) {
			d.HitsAddend = wrapperspb.UInt64(get(get(dm, 3).Message(), 1).Uint())
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r, notUTF8
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
		{0x0a, 0x02, 0xff, 0xfe},             // domain not UTF-8: read
		{0x0a, 0x01, 0xff, 0x0a, 0x01, 'd'},  // a value not UTF-8, then one: protobuf refuses both
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
