package server

import (
	"errors"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// The proto codec, the fallback, registers itself.
	_ "google.golang.org/grpc/encoding/proto"
)

// The rate limit service's codec
//
// Profiling sluice serve under load showed protobuf's generic unmarshal
// of RateLimitRequest at ~7% of a decision's CPU and the marshal of the
// answer at ~2%. rlsCodec reads the request and writes the response with
// code written for these two messages (protowire, no reflection; the
// request's strings are substrings of one copy of the message), and hands
// every other message (health, reflection) to grpc-go's proto codec. It is
// set on Sluice's gRPC server only (grpc.ForceServerCodecV2), never
// registered globally. Its output is protobuf's own (the tests compare
// bytes), and its input is read as protobuf reads it: a known field with
// another wire type is skipped as unknown, a repeated singular field's
// last value wins and messages merge. Unknown fields are dropped (nothing
// here reads them). One difference: a string need not be UTF-8, where
// protobuf refuses the message. Envoy passes a header's bytes on as they
// are (a header may carry Latin-1 bytes, which are not UTF-8), and a call
// refused for them is let through by Envoy's default failure_mode_deny:
// false, so a client could escape its limit with one such byte. A key or
// value is decided on its bytes; a domain that is not UTF-8 is no
// configured domain (answered as an unknown one).
type rlsCodec struct{ fallback encoding.CodecV2 }

// newRLSCodec returns the codec; grpc-go's proto codec is the fallback.
func newRLSCodec() rlsCodec { return rlsCodec{fallback: encoding.GetCodecV2("proto")} }

// FastServerOptions are the gRPC server options Sluice sets for speed:
// the stream workers, this codec and fixed flow-control windows. Exported
// for the load generator's "bare grpc-go with the same options" floor.
func FastServerOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{grpc.NumStreamWorkers(DefaultStreamWorkers), grpc.ForceServerCodecV2(newRLSCodec())}, windowOptions()...)
}

func (rlsCodec) Name() string { return "proto" }

// Marshal writes the rate limit answer by hand, and every other message
// (health's, reflection's) with protobuf, into a buffer of its own size:
// grpc-go's proto codec takes one from its pool, whose sizes jump from
// 32 KB to 1 MB, and an answer waiting for the client's flow-control
// window holds it: reflection's answer for the rate limit service (25
// files, 44 KB) held 1 MB.
func (c rlsCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *rlsv3.RateLimitResponse:
		if b, ok := appendResponse(make([]byte, 0, 64+48*len(m.Statuses)+48*len(m.ResponseHeadersToAdd)), m); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.fallback.Marshal(v)
}

func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlsv3.RateLimitRequest); ok {
		// One copy of the message; its strings are substrings of it.
		var s string
		if len(data) == 1 {
			s = string(data[0].ReadOnlyData())
		} else {
			s = string(data.Materialize())
		}
		return decodeRequest(unsafe.Slice(unsafe.StringData(s), len(s)), s, r)
	}
	return c.fallback.Unmarshal(data, v)
}

var errWire = errors.New("rate limit request: malformed protobuf")

// field reads one field of b: its number, wire type, the field's bytes
// (for the bytes type) or varint, and what follows. An unknown or
// mistyped field is skipped: ok is false.
type field struct {
	num  protowire.Number
	typ  protowire.Type
	v    uint64
	off  int // start of the bytes in the message (BytesType)
	n    int // length of the bytes (BytesType)
	rest int // bytes consumed
}

// next reads the field at b[0:] (b is the message from base on).
func next(b []byte, base int) (field, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num > protowire.MaxValidNumber { // ConsumeTag checks only the low end, protobuf both
		return field{}, errWire
	}
	f := field{num: num, typ: typ, rest: n}
	switch typ {
	case protowire.VarintType:
		v, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return field{}, errWire
		}
		f.v, f.rest = v, n+m
	case protowire.BytesType:
		l, m := protowire.ConsumeVarint(b[n:])
		if m < 0 || l > uint64(len(b)-n-m) {
			return field{}, errWire
		}
		f.off, f.n, f.rest = base+n+m, int(l), n+m+int(l)
	default:
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return field{}, errWire
		}
		f.rest = n + m
	}
	return f, nil
}

// decodeRequest reads b (whose text is s) into r, merging as protobuf does,
// but for the descriptors past MaxDescriptors + 1 and the entries of a
// descriptor past MaxEntries + 1, which are skipped: the request is
// refused for their number (validate) whatever they hold.
func decodeRequest(b []byte, s string, r *rlsv3.RateLimitRequest) error {
	return walk(b, 0, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			return str(s, f, &r.Domain)
		case f.num == 2 && f.typ == protowire.BytesType:
			if len(r.Descriptors) > MaxDescriptors {
				// The request is refused (validate): the rest is not
				// built, which took 68 MB for a megabyte of empty
				// descriptors (two bytes each).
				return nil
			}
			d := new(commonv3.RateLimitDescriptor)
			r.Descriptors = append(r.Descriptors, d)
			return decodeDescriptor(b, s, f, d)
		case f.num == 3 && f.typ == protowire.VarintType:
			r.HitsAddend = uint32(f.v)
		}
		return nil
	})
}

func decodeDescriptor(b []byte, s string, at field, d *commonv3.RateLimitDescriptor) error {
	return walk(b[at.off:at.off+at.n], at.off, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			if len(d.Entries) > MaxEntries {
				return nil // refused, as past MaxDescriptors
			}
			e := new(commonv3.RateLimitDescriptor_Entry)
			d.Entries = append(d.Entries, e)
			return walk(b[f.off:f.off+f.n], f.off, func(g field) error {
				switch {
				case g.num == 1 && g.typ == protowire.BytesType:
					return str(s, g, &e.Key)
				case g.num == 2 && g.typ == protowire.BytesType:
					return str(s, g, &e.Value)
				}
				return nil
			})
		case f.num == 2 && f.typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = new(commonv3.RateLimitDescriptor_RateLimitOverride)
			}
			o := d.Limit
			return walk(b[f.off:f.off+f.n], f.off, func(g field) error {
				switch {
				case g.num == 1 && g.typ == protowire.VarintType:
					o.RequestsPerUnit = uint32(g.v)
				case g.num == 2 && g.typ == protowire.VarintType:
					o.Unit = typev3.RateLimitUnit(int32(g.v))
				case g.num == 3 && g.typ == protowire.BytesType:
					if o.UnitMultiplier == nil {
						o.UnitMultiplier = new(wrapperspb.UInt32Value)
					}
					return walk(b[g.off:g.off+g.n], g.off, func(h field) error {
						if h.num == 1 && h.typ == protowire.VarintType {
							o.UnitMultiplier.Value = uint32(h.v)
						}
						return nil
					})
				}
				return nil
			})
		case f.num == 3 && f.typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = new(wrapperspb.UInt64Value)
			}
			return walk(b[f.off:f.off+f.n], f.off, func(g field) error {
				if g.num == 1 && g.typ == protowire.VarintType {
					d.HitsAddend.Value = g.v
				}
				return nil
			})
		case f.num == 4 && f.typ == protowire.VarintType:
			d.IsNegativeHits = f.v != 0
		}
		return nil
	})
}

// walk calls fn on every field of b, a message starting at base in the
// whole request.
func walk(b []byte, base int, fn func(field) error) error {
	for off := 0; off < len(b); {
		f, err := next(b[off:], base+off)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
		off += f.rest
	}
	return nil
}

// str sets dst to the string of field f, whatever its bytes (see
// rlsCodec).
func str(s string, f field, dst *string) error {
	*dst = s[f.off : f.off+f.n]
	return nil
}

// appendResponse appends r in protobuf's encoding to b; ok is false when r
// holds something it does not write (the caller then uses protobuf).
func appendResponse(b []byte, r *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(r.RequestHeadersToAdd) > 0 || len(r.RawBody) > 0 || r.DynamicMetadata != nil || r.Quota != nil {
		return nil, false
	}
	if r.OverallCode != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.OverallCode))
	}
	for _, st := range r.Statuses {
		if st == nil || st.Quota != nil {
			return nil, false
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(statusSize(st)))
		if st.Code != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(st.Code))
		}
		if l := st.CurrentLimit; l != nil {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(limitSize(l)))
			if l.RequestsPerUnit != 0 {
				b = protowire.AppendTag(b, 1, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(l.RequestsPerUnit))
			}
			if l.Unit != 0 {
				b = protowire.AppendTag(b, 2, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(l.Unit))
			}
			if l.Name != "" {
				b = protowire.AppendTag(b, 3, protowire.BytesType)
				b = protowire.AppendString(b, l.Name)
			}
			if m := l.UnitMultiplier; m != nil {
				b = protowire.AppendTag(b, 4, protowire.BytesType)
				b = protowire.AppendVarint(b, uint64(uint32Size(m.Value)))
				if m.Value != 0 {
					b = protowire.AppendTag(b, 1, protowire.VarintType)
					b = protowire.AppendVarint(b, uint64(m.Value))
				}
			}
		}
		if st.LimitRemaining != 0 {
			b = protowire.AppendTag(b, 3, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(st.LimitRemaining))
		}
		if d := st.DurationUntilReset; d != nil {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(durationSize(d.Seconds, d.Nanos)))
			if d.Seconds != 0 {
				b = protowire.AppendTag(b, 1, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(d.Seconds))
			}
			if d.Nanos != 0 {
				b = protowire.AppendTag(b, 2, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(int64(d.Nanos)))
			}
		}
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h == nil {
			return nil, false
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h)))
		if h.Key != "" {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendString(b, h.Key)
		}
		if h.Value != "" {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendString(b, h.Value)
		}
		if len(h.RawValue) > 0 {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendBytes(b, h.RawValue)
		}
	}
	return b, true
}

func varintField(v uint64) int { return 1 + protowire.SizeVarint(v) }

func bytesField(n int) int { return 1 + protowire.SizeBytes(n) }

func limitSize(l *rlsv3.RateLimitResponse_RateLimit) int {
	n := 0
	if l.RequestsPerUnit != 0 {
		n += varintField(uint64(l.RequestsPerUnit))
	}
	if l.Unit != 0 {
		n += varintField(uint64(l.Unit))
	}
	if l.Name != "" {
		n += bytesField(len(l.Name))
	}
	if m := l.UnitMultiplier; m != nil {
		n += bytesField(uint32Size(m.Value))
	}
	return n
}

// uint32Size is the size of a UInt32Value holding v.
func uint32Size(v uint32) int {
	if v == 0 {
		return 0
	}
	return varintField(uint64(v))
}

func durationSize(sec int64, nanos int32) int {
	n := 0
	if sec != 0 {
		n += varintField(uint64(sec))
	}
	if nanos != 0 {
		n += varintField(uint64(int64(nanos)))
	}
	return n
}

func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus) int {
	n := 0
	if st.Code != 0 {
		n += varintField(uint64(st.Code))
	}
	if st.CurrentLimit != nil {
		n += bytesField(limitSize(st.CurrentLimit))
	}
	if st.LimitRemaining != 0 {
		n += varintField(uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		n += bytesField(durationSize(d.Seconds, d.Nanos))
	}
	return n
}

func headerSize(h *corev3.HeaderValue) int {
	n := 0
	if h.Key != "" {
		n += bytesField(len(h.Key))
	}
	if h.Value != "" {
		n += bytesField(len(h.Value))
	}
	if len(h.RawValue) > 0 {
		n += bytesField(len(h.RawValue))
	}
	return n
}
