package server_test

import (
	"bytes"
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/memstore"
)

// fuzzConf has a descriptor of each kind a request's values meet:
// nested keys, literal and wildcard values (shared and not, with
// value_to_metric), detailed_metric, unlimited, replaces, shadow and
// quota modes, a block list, a token bucket.
const fuzzConf = `domain: f
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: b
        value: "x*y"
        rate_limit: {unit: minute, requests_per_unit: 2, name: ab, replaces: [{name: aw}]}
      - key: b
        value_to_metric: true
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: w
    value: "*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 4, name: aw}
  - key: v
    value: "p*"
    value_to_metric: true
    algorithm: token_bucket
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: u
    rate_limit: {unlimited: true}
  - key: s
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: z
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: n
    value: "1"
`

// FuzzShouldRateLimit: whatever descriptors a client has Envoy send
// (keys and values of any bytes, any number, hits and overrides), the
// service decides them: an answer with a status for each, or
// INVALID_ARGUMENT for the bounds it documents (more than MaxDescriptors
// descriptors or MaxEntries entries, an override's unit or period it
// cannot count); never another error, never a panic (which would end
// the daemon). data holds descriptors apart by 0xfe, their entries by
// 0xfd, an entry's key and value by 0xfc.
func FuzzShouldRateLimit(f *testing.F) {
	for _, s := range []string{
		"a\xfc1", "a\xfc1\xfdb\xfcxzy", "a\xfc1\xfdb\xfcq", "w\xfcanything\xfew\xfc", "v\xfcp\xff\xfeu\xfc1\xfes\xfc\x00",
		"q\xfc1\xfeq\xfc2\xfez\xfc", "n\xfc1", "n\xfc2", "\xfc", "", "\xfe\xfe", "a\xfc" + string(bytes.Repeat([]byte("x"), 700)),
	} {
		f.Add([]byte(s), uint32(0), uint8(0))
		f.Add([]byte(s), uint32(3), uint8(0x27))
	}
	e := startRLS(f, memstore.New(memstore.Options{}), writeConf(f, fuzzConf), envOpts{headers: true})
	f.Fuzz(func(t *testing.T, data []byte, hits uint32, flags uint8) {
		req := &rlsv3.RateLimitRequest{Domain: "f", HitsAddend: hits}
		entriesOver := false
		for _, d := range bytes.Split(data, []byte{0xfe}) {
			pb := &commonv3.RateLimitDescriptor{}
			if len(d) > 0 {
				for _, en := range bytes.Split(d, []byte{0xfd}) {
					k, v, _ := bytes.Cut(en, []byte{0xfc})
					pb.Entries = append(pb.Entries, &commonv3.RateLimitDescriptor_Entry{Key: string(k), Value: string(v)})
				}
			}
			entriesOver = entriesOver || len(pb.Entries) > server_MaxEntries
			req.Descriptors = append(req.Descriptors, pb)
		}
		d0 := req.Descriptors[0]
		if flags&1 != 0 {
			d0.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: hits, Unit: typev3.RateLimitUnit(flags >> 4)}
			if flags&8 != 0 {
				d0.Limit.UnitMultiplier = wrapperspb.UInt32(hits)
			}
		}
		if flags&2 != 0 {
			d0.HitsAddend = wrapperspb.UInt64(uint64(hits) << (flags >> 5))
		}
		d0.IsNegativeHits = flags&4 != 0
		resp, err := e.rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			bound := len(req.Descriptors) > server_MaxDescriptors || entriesOver || d0.Limit != nil
			if status.Code(err) != codes.InvalidArgument || !bound {
				t.Fatalf("%q (hits %d, flags %#x): %v, want an answer", data, hits, flags, err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%q: %d statuses for %d descriptors", data, len(resp.Statuses), len(req.Descriptors))
		}
	})
}
