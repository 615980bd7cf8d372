package server

import (
	"errors"
	"fmt"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/internal/descriptors"
)

// This file turns the RateLimitConfig resources of an xDS server into
// descriptor configs in the file format, so that they are read, checked
// and matched exactly as files are; xds.go subscribes to them.

// xdsDoc returns c as a descriptor file named by its resource name. The
// descriptors are written in YAML's flow style, on one line
// (descriptors: [{key: …, descriptors: […]}, …]), so that it is of the order of c's own
// size whatever its depth: as a block file, each level indented further,
// a 97 KB config nested 9,000 deep took 1.9 GB to write, and 40,000
// descriptors at the 64th level (630 KB) made a 43 MB file. Descriptors
// nested past descriptors.MaxDepth are not written, but for the list
// that passes it, so that the file is refused for it as a file would be;
// a file over descriptors.MaxFileSize is not written whole.
func xdsDoc(c *rlsconf.RateLimitConfig) (descriptors.Doc, error) {
	f := docFile{Domain: c.GetDomain(), Descriptors: docDescriptors(c.GetDescriptors(), 1)}
	w := cappedWriter{max: descriptors.MaxFileSize}
	enc := yaml.NewEncoder(&w)
	err := enc.Encode(&f)
	if err == nil {
		err = enc.Close()
	}
	switch {
	case w.over:
		return descriptors.Doc{}, fmt.Errorf("%s: larger than %d bytes as a descriptor file", XDSDocName(c.GetName()), descriptors.MaxFileSize)
	case err != nil:
		return descriptors.Doc{}, fmt.Errorf("%s: %w", XDSDocName(c.GetName()), err)
	}
	return descriptors.Doc{Name: XDSDocName(c.GetName()), Data: w.b}, nil
}

// cappedWriter keeps what is written to it up to max bytes, and refuses
// what would pass them.
type cappedWriter struct {
	b    []byte
	max  int
	over bool
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	if len(w.b)+len(p) > w.max {
		w.over = true
		return 0, errors.New("too large")
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// XDSDocName is how the problems of the RateLimitConfig named name start.
func XDSDocName(name string) string { return fmt.Sprintf("RateLimitConfig %q", name) }

// docFile and the types below are the file format's keys that a
// RateLimitConfig carries; left out when zero, as a file leaves them out.
type docFile struct {
	Domain string `yaml:"domain"`
	// In flow style (see xdsDoc), and so is all it holds.
	Descriptors []docDescriptor `yaml:"descriptors,omitempty,flow"`
}

type docDescriptor struct {
	Key            string          `yaml:"key,omitempty"`
	Value          string          `yaml:"value,omitempty"`
	RateLimit      *docRateLimit   `yaml:"rate_limit,omitempty"`
	Descriptors    []docDescriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool            `yaml:"shadow_mode,omitempty"`
	QuotaMode      bool            `yaml:"quota_mode,omitempty"`
	DetailedMetric bool            `yaml:"detailed_metric,omitempty"`
}

type docRateLimit struct {
	Unit            string       `yaml:"unit,omitempty"`
	RequestsPerUnit *uint32      `yaml:"requests_per_unit,omitempty"`
	Unlimited       bool         `yaml:"unlimited,omitempty"`
	Name            string       `yaml:"name,omitempty"`
	Replaces        []docReplace `yaml:"replaces,omitempty"`
}

// xdsLongUnits are the RateLimitUnit numbers of the reference's
// rls_conf.proto after DAY (4).
var xdsLongUnits = map[int32]string{5: "month", 6: "year", 7: "week"}

type docReplace struct {
	Name string `yaml:"name"`
}

// docDescriptors returns ds, a list of descriptors at depth (1 for the
// top level), in the file format. A list past descriptors.MaxDepth is
// written as one empty descriptor: the file is refused for its depth,
// whatever the list holds.
func docDescriptors(ds []*rlsconf.RateLimitDescriptor, depth int) []docDescriptor {
	if len(ds) == 0 {
		return nil
	}
	if depth > descriptors.MaxDepth {
		return []docDescriptor{{}}
	}
	out := make([]docDescriptor, len(ds))
	for i, d := range ds {
		out[i] = docDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      docPolicy(d.GetRateLimit()),
			Descriptors:    docDescriptors(d.GetDescriptors(), depth+1),
			ShadowMode:     d.GetShadowMode(),
			QuotaMode:      quotaMode(d),
			DetailedMetric: d.GetDetailedMetric(),
		}
	}
	return out
}

// xdsQuotaMode is the number of RateLimitDescriptor's quota_mode in the
// reference's rls_conf.proto, which the reference service reads from its
// xDS server. The Go package of the protocol used here predates it (and
// metadata, 8, ignored as a file's is), so protobuf keeps it among the
// descriptor's unknown fields.
const xdsQuotaMode = 7

// quotaMode reads d's quota_mode from its unknown fields as protobuf
// reads a bool: a varint, the last one given winning; one of another wire
// type is no quota_mode.
func quotaMode(d *rlsconf.RateLimitDescriptor) bool {
	on := false
	for b := []byte(d.ProtoReflect().GetUnknown()); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return on
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return on
		}
		if num == xdsQuotaMode && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b[n:])
			on = v != 0
		}
		b = b[n+m:]
	}
	return on
}

func docPolicy(p *rlsconf.RateLimitPolicy) *docRateLimit {
	if p == nil {
		return nil
	}
	r := &docRateLimit{Unlimited: p.GetUnlimited(), Name: p.GetName()}
	if u := p.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
		// SECOND…DAY by their names, read in any case; the numbers the
		// reference's newer rls_conf.proto gives the longer units by
		// theirs (the Go package of the protocol used here stops at
		// DAY); any other number as it is, refused as a unit.
		r.Unit = u.String()
		if n, ok := xdsLongUnits[int32(u)]; ok {
			r.Unit = n
		}
	}
	if n := p.GetRequestsPerUnit(); !r.Unlimited || n != 0 {
		// proto3 cannot tell 0 from absent: 0 is a limit of none (a
		// block list), as the reference service reads it.
		r.RequestsPerUnit = &n
	}
	for _, rp := range p.GetReplaces() {
		r.Replaces = append(r.Replaces, docReplace{Name: rp.GetName()})
	}
	return r
}
