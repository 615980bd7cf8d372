package server

import (
	"reflect"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

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
