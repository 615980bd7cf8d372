package server

import (
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// TestRLSCodecBoundsAllocation: a request of a megabyte of empty
// descriptors (two bytes each), or of one descriptor of empty entries,
// is refused (validate) with a bounded number of allocations, whatever
// its count: the codec built every descriptor and entry before the count
// was checked, 500,000 of them (68 MB) for one request of 1 MiB, the
// largest taken, for each of the calls in flight.
func TestRLSCodecBoundsAllocation(t *testing.T) {
	const n = 500_000
	descs := []byte{0x0a, 0x01, 'd'} // domain "d"
	for range n {
		descs = protowire.AppendTag(descs, 2, protowire.BytesType)
		descs = protowire.AppendVarint(descs, 0)
	}
	var entries []byte
	for range n {
		entries = protowire.AppendTag(entries, 1, protowire.BytesType)
		entries = protowire.AppendVarint(entries, 0)
	}
	oneDesc := []byte{0x0a, 0x01, 'd'}
	oneDesc = protowire.AppendTag(oneDesc, 2, protowire.BytesType)
	oneDesc = protowire.AppendBytes(oneDesc, entries)
	c := newRLSCodec()
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"500,000 descriptors", descs, "descriptors: at most 64"},
		{"500,000 entries", oneDesc, "entries, at most 64"},
	} {
		var err error
		allocs := testing.AllocsPerRun(2, func() {
			var r rlsv3.RateLimitRequest
			if err = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tc.b)}, &r); err == nil {
				err = validate(&r)
			}
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
		if allocs > 1000 {
			t.Errorf("%s (%d bytes): %v allocations to refuse it, want at most 1,000 (the descriptors and entries past the bound not built)", tc.name, len(tc.b), allocs)
		}
	}
}
