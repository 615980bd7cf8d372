package server

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/descriptors"
)

// TestXDSDocFields: every field of a RateLimitConfig reaches the rule it
// configures, as the same keys of a descriptor file do.
func TestXDSDocFields(t *testing.T) {
	c := &rlsconf.RateLimitConfig{Name: "rl", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "source", Value: "proxy", Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "dest", Value: "mock", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 4, Name: "b",
				Replaces: []*rlsconf.RateLimitReplace{{Name: "a"}, {Name: "c"}}},
		}}},
		{Key: "path", Value: "/free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		{Key: "block", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND}},
		{Key: "white", Value: "listed"},
	}}
	d, err := xdsDoc(c)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != `RateLimitConfig "rl"` {
		t.Errorf("doc name %q, want RateLimitConfig \"rl\"", d.Name)
	}
	set, err := descriptors.FromDocs([]descriptors.Doc{d}, descriptors.LoadOptions{})
	if err != nil {
		t.Fatalf("FromDocs(xdsDoc) = %v\n%s", err, d.Data)
	}
	type rule struct {
		path, name      string
		replaces        []string
		rpu             uint32
		unit            descriptors.Unit
		unlimited       bool
		shadow, details bool
	}
	var got []rule
	set.Each(func(r *descriptors.Rule) {
		got = append(got, rule{r.Path, r.Name, r.Replaces, r.RequestsPerUnit, r.Unit, r.Unlimited, r.Shadow, r.DetailedMetric})
	})
	want := []rule{
		{path: "source_proxy.dest_mock", name: "b", replaces: []string{"a", "c"}, rpu: 4, unit: descriptors.Minute, shadow: true, details: true},
		{path: "path_/free", unlimited: true},
		{path: "block", rpu: 0, unit: descriptors.Second},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rules of the converted config:\n got %+v\nwant %+v\n(from %s)", got, want, d.Data)
	}
	var m descriptors.Match
	if set.Lookup("edge", []descriptors.Entry{{Key: "white", Value: "listed"}}, &m) && m.Rule != nil {
		t.Errorf("white=listed (no rate_limit, no children): rule %v, want whitelisted", m.Rule)
	}
}

// TestXDSDocRefused: what a file may not hold, a RateLimitConfig may not
// either, and the problem names the config and the key.
func TestXDSDocRefused(t *testing.T) {
	for _, tc := range []struct {
		c    *rlsconf.RateLimitConfig
		want string
	}{
		{&rlsconf.RateLimitConfig{Name: "n"}, `RateLimitConfig "n": domain: must not be empty`},
		{&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Value: "v"}}}, "descriptors[0].key: missing"},
		{&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}}}, "descriptors[0].rate_limit.unit: missing"},
		{&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: 42, RequestsPerUnit: 1}}}}, `unknown unit "42"`},
		{&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: rlsconf.RateLimitUnit_DAY}}}}, "an unlimited rate_limit takes no unit"},
		{&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k"}, {Key: "k"}}}, `duplicate descriptor "k"`},
		{&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 1, Name: "x", Replaces: []*rlsconf.RateLimitReplace{{Name: "x"}}}}}}, "cannot replace itself"},
	} {
		d, err := xdsDoc(tc.c)
		if err == nil {
			_, err = descriptors.FromDocs([]descriptors.Doc{d}, descriptors.LoadOptions{})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.c, err, tc.want)
		}
	}
}

// TestXDSQuotaMode: the reference's rls_conf.proto has quota_mode (7) and
// metadata (8) on a RateLimitDescriptor, which the Go package of the
// protocol used here predates; the reference service reads quota_mode
// from its xDS server. A descriptor sent with it is in quota_mode, as the
// same descriptor in a file: were it read as an ordinary limit, it would
// deny requests the reference lets through while another quota
// descriptor is under its limit. metadata is ignored, as in a file.
func TestXDSQuotaMode(t *testing.T) {
	// The fields as a server built on the newer proto sends them: a
	// Struct {"tier": "gold"} for metadata.
	var meta []byte
	meta = protowire.AppendTag(meta, 1, protowire.BytesType) // fields, a map entry
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "tier")
	value := protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), "gold") // string_value
	entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), value)
	meta = protowire.AppendBytes(meta, entry)
	newer := func(quota ...uint64) []byte {
		var b []byte
		for _, q := range quota {
			b = protowire.AppendVarint(protowire.AppendTag(b, 7, protowire.VarintType), q)
		}
		return protowire.AppendBytes(protowire.AppendTag(b, 8, protowire.BytesType), meta)
	}
	limit := func() *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 5}
	}
	c := &rlsconf.RateLimitConfig{Name: "rl", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "q", RateLimit: limit()},
		{Key: "plain", RateLimit: limit()},
		{Key: "off", RateLimit: limit()},
		{Key: "parent", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "child", RateLimit: limit()}}},
	}}
	c.Descriptors[0].ProtoReflect().SetUnknown(newer(1))
	c.Descriptors[2].ProtoReflect().SetUnknown(newer(1, 0)) // the last wins, as protobuf reads it
	c.Descriptors[3].Descriptors[0].ProtoReflect().SetUnknown(newer(2))
	wire, err := proto.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := decodeResponse(&discovery.DiscoveryResponse{TypeUrl: XDSTypeURL, Resources: []*anypb.Any{{TypeUrl: XDSTypeURL, Value: wire}}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := descriptors.FromDocs(docs, descriptors.LoadOptions{})
	if err != nil {
		t.Fatalf("FromDocs = %v\n%s", err, docs[0].Data)
	}
	got := map[string]bool{}
	set.Each(func(r *descriptors.Rule) { got[r.Path] = r.Quota })
	want := map[string]bool{"q": true, "plain": false, "off": false, "parent.child": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("quota_mode of the rules: got %v, want %v\n(from %s)", got, want, docs[0].Data)
	}
}

// FuzzXDSConfig: whatever a RateLimitConfig resource holds (the fields
// of the newer proto too), it is read without a panic, written as a
// descriptor file that reads back, and a problem names the resource.
func FuzzXDSConfig(f *testing.F) {
	seed := &rlsconf.RateLimitConfig{Name: "rl", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "v*", ShadowMode: true, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 3, Name: "a"}},
		{Key: "u", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}, Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "c"}}},
	}}
	seed.Descriptors[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, xdsQuotaMode, protowire.VarintType), 1))
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var rc rlsconf.RateLimitConfig
		if proto.Unmarshal(b, &rc) != nil {
			return
		}
		d, err := xdsDoc(&rc)
		if err != nil {
			t.Fatalf("xdsDoc(%v): %v", &rc, err)
		}
		if _, err := descriptors.FromDocs([]descriptors.Doc{d}, descriptors.LoadOptions{}); err != nil && !strings.Contains(err.Error(), XDSDocName(rc.GetName())+":") {
			t.Fatalf("FromDocs of %v: %v, which does not name the resource", &rc, err)
		}
	})
}

// TestXDSDeepConfigs: a RateLimitConfig is written in the file format at
// a size of the order of its own, whatever its depth. Written as a block
// YAML file, each level of nesting indented a line more, a 97 KB config
// nested 9,000 deep took 1.9 GB and seconds to write, only to be refused (a
// response of a thousand of them would have exhausted the memory), and a
// 150 KB config of 10,000 descriptors at the 64th level was refused as a
// file over 8 MiB (11 MB), where the reference service loads it.
func TestXDSDeepConfigs(t *testing.T) {
	chain := func(depth int, leaves []*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
		ds := leaves
		for range depth - 1 {
			ds = []*rlsconf.RateLimitDescriptor{{Key: "level", Descriptors: ds}}
		}
		return &rlsconf.RateLimitConfig{Name: "deep", Domain: "edge", Descriptors: ds}
	}
	limit := &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 5}

	wide := make([]*rlsconf.RateLimitDescriptor, 10_000)
	for i := range wide {
		wide[i] = &rlsconf.RateLimitDescriptor{Key: fmt.Sprint("k", i), RateLimit: limit}
	}
	c := chain(64, wide)
	d, err := xdsDoc(c)
	if err != nil {
		t.Fatalf("xdsDoc(10,000 descriptors at level 64, %d bytes over the wire): %v", proto.Size(c), err)
	}
	set, err := descriptors.FromDocs([]descriptors.Doc{d}, descriptors.LoadOptions{})
	if err != nil {
		t.Fatalf("10,000 descriptors at level 64 (%d bytes over the wire, %d as a file): %v", proto.Size(c), len(d.Data), err)
	}
	entries := make([]descriptors.Entry, 64)
	for i := range entries[:63] {
		entries[i] = descriptors.Entry{Key: "level", Value: "x"}
	}
	entries[63] = descriptors.Entry{Key: "k9999", Value: "x"}
	var m descriptors.Match
	if set.Lookup("edge", entries, &m); m.Rule == nil || m.Rule.RequestsPerUnit != 5 {
		t.Errorf("the last descriptor at level 64 matched %v, want its 5/minute", m.Rule)
	}

	c = chain(9_000, []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit}})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d, err = xdsDoc(c)
	if err == nil {
		_, err = descriptors.FromDocs([]descriptors.Doc{d}, descriptors.LoadOptions{})
	}
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "nested deeper than 64 levels") || !strings.HasPrefix(err.Error(), `RateLimitConfig "deep": `) {
		t.Errorf("a config nested 9,000 deep: %.300v, want it refused for its depth, naming the resource", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Errorf("a config nested 9,000 deep (%d bytes over the wire) took %d MB to refuse, want less than 32", proto.Size(c), got>>20)
	}
}

// TestXDSDocStrings: whatever a key, value, domain or name holds, the
// file written for it reads back as that string, YAML's own syntax, the
// YAML 1.1 booleans and numbers, and flow style's brackets and commas
// included.
func TestXDSDocStrings(t *testing.T) {
	for _, v := range []string{"1_000", "0b101", "1:20", "~", "null", "Null", ".inf", "0o17", "0777", "+12", "0x1F", "1e3", "1.", "-.5",
		"2001-12-14", "=", "<<", "yes", "y", "N", "off", "TRUE", "NaN", "-", "? x", "a: b", "#c", "a #c", " lead", "trail ", "\t", "*",
		"&a", "!tag", "%x", "@x", "`x", "|", ">", "\"q", "'q", "{a}", "[a]", "a, b", "a]", "a}", "x\ny", "\u2028", "\x00", "\x7f",
		"\ufeff", "é", "---", "...", strings.Repeat("long words ", 30)} {
		c := &rlsconf.RateLimitConfig{Name: v, Domain: v, Descriptors: []*rlsconf.RateLimitDescriptor{{Key: v, Value: v,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 3, Name: v}}}}
		d, err := xdsDoc(c)
		if err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		set, err := descriptors.FromDocs([]descriptors.Doc{d}, descriptors.LoadOptions{})
		if err != nil {
			t.Errorf("%q: %v\n%s", v, err, d.Data)
			continue
		}
		var m descriptors.Match
		if set.Lookup(v, []descriptors.Entry{{Key: v, Value: v}}, &m); m.Rule == nil || m.Rule.Name != v || m.Rule.RequestsPerUnit != 3 {
			t.Errorf("%q: the entry matched %v, want the rule named so\n%s", v, m.Rule, d.Data)
		}
	}
}
