package server

import (
	"math/rand"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// randomWire returns a random protobuf-shaped message: fields 1 to 4
// mostly (those the request, descriptor, entry and override use), of every
// wire type, nested messages, groups, odd strings, overlong varints and
// lengths, and now and then a cut.
func randomWire(r *rand.Rand, depth int) []byte {
	var b []byte
	for range r.Intn(6) {
		num := protowire.Number(1 + r.Intn(4))
		if r.Intn(10) == 0 {
			num = protowire.Number(r.Intn(1 << 29))
		}
		switch r.Intn(6) {
		case 0, 1:
			b = protowire.AppendTag(b, num, protowire.BytesType)
			var inner []byte
			if depth < 4 && r.Intn(2) == 0 {
				inner = randomWire(r, depth+1)
			} else {
				inner = make([]byte, r.Intn(6))
				for j := range inner {
					inner[j] = "ab\xff\x80c"[r.Intn(5)]
				}
			}
			if r.Intn(20) == 0 && len(inner) < 0x80 {
				b = append(b, byte(len(inner))|0x80, 0x00) // overlong length
			} else {
				b = protowire.AppendVarint(b, uint64(len(inner)))
			}
			b = append(b, inner...)
		case 2, 3:
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, r.Uint64()>>uint(r.Intn(64)))
			if r.Intn(20) == 0 {
				b[len(b)-1] |= 0x80 // overlong varint
				b = append(b, 0x00)
			}
		case 4:
			b = protowire.AppendTag(b, num, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, r.Uint32())
		case 5:
			if r.Intn(3) == 0 {
				b = protowire.AppendTag(b, num, protowire.StartGroupType)
				b = append(b, randomWire(r, depth+1)...)
				b = protowire.AppendTag(b, num, protowire.EndGroupType)
			} else {
				b = protowire.AppendTag(b, num, protowire.Fixed64Type)
				b = protowire.AppendFixed64(b, r.Uint64())
			}
		}
	}
	if r.Intn(30) == 0 && len(b) > 0 {
		b = b[:r.Intn(len(b))]
	}
	return b
}

// The codec reads structured random messages as protobuf does: the byte
// fuzzer (FuzzRLSCodecRequest) seldom builds a well-formed descriptor with
// entries and an override nested in it; these do, thousands of times.
func TestRLSCodecRandomMessages(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	read, rich := 0, 0
	for range 200_000 {
		b := randomWire(r, 0)
		checkDecode(t, b)
		var m rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &m) == nil {
			read++
			for _, d := range m.Descriptors {
				if len(d.Entries) > 0 || d.Limit != nil || d.HitsAddend != nil {
					rich++
				}
			}
		}
	}
	// The generator must reach the nested fields, or it checks little.
	if read < 100_000 || rich < 2_000 {
		t.Fatalf("%d of 200000 messages read by protobuf, %d descriptors with entries, override or hits: too few", read, rich)
	}
}
