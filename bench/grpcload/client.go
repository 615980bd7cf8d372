package main

import (
	"errors"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The lean client
//
// The load generator shares the two cores with the servers and Redis, so
// every µs it spends per call is taken from the server it measures, the
// same for every row: it lowers every row's decisions/s and raises every
// row's p99, and it pulls the ratio to the reference towards 1. The lean
// client (the default, -client lean) costs less per call than grpc-go's
// generated client used plainly (-client proto):
//
//   - each key's request is encoded once, before the run, and sent as
//     those bytes (rawCodec), byte for byte what proto.Marshal writes;
//   - of the answer only overall_code is read (protowire, no message);
//   - each worker has one context whose deadline is the end of the cell
//     plus 10 s, instead of a context.WithTimeout (a timer) per call: the
//     server still receives a grpc-timeout with every call, as from Envoy;
//   - the generator's collector runs at GOGC=400 unless GOGC is set.
//
// What the servers receive is the same either way: the same method, the
// same request bytes, a deadline on every call.

// rawRequest is a RateLimitRequest already encoded.
type rawRequest struct{ b []byte }

// codeReply is what the lean client reads of a RateLimitResponse.
type codeReply struct{ code rlsv3.RateLimitResponse_Code }

// rawCodec writes rawRequest's bytes and reads codeReply; it is set on the
// lean client's connections only.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*rawRequest)
	if !ok {
		return nil, errors.New("rawCodec: not a rawRequest")
	}
	return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*codeReply)
	if !ok {
		return errors.New("rawCodec: not a codeReply")
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	r.code = 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("rawCodec: malformed response")
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			c, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return errors.New("rawCodec: malformed response")
			}
			r.code = rlsv3.RateLimitResponse_Code(c)
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return errors.New("rawCodec: malformed response")
		}
		b = b[m:]
	}
	return nil
}

// request returns the benchmark's request for one key value.
func request(value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "key", Value: value}},
	}}}
}

// encodeRequests encodes each key's request once.
func encodeRequests(names []string) ([]rawRequest, error) {
	out := make([]rawRequest, len(names))
	for i, n := range names {
		b, err := proto.Marshal(request(n))
		if err != nil {
			return nil, err
		}
		out[i] = rawRequest{b}
	}
	return out, nil
}
