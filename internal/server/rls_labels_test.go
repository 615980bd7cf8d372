package server_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice/internal/metrics"
)

// TestEnvoyLabelsBoundedInBytes: a descriptor label carrying request
// values (detailed_metric, a limit override) is cut to a bounded length,
// whatever the client sends: a gRPC message may be 1 MiB, and 1,000 such
// labels in four counters each once held 4 GB and answered every scrape
// with as much. Labels alike in their first bytes stay apart.
func TestEnvoyLabelsBoundedInBytes(t *testing.T) {
	set := writeConf(t, `domain: big
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	e := startRLS(t, newStore(t, "memory"), set, envOpts{})
	const n, size = 8, 256 << 10 // 8 distinct values of 256 KiB each
	long := strings.Repeat("é", size/2)
	for i := range n {
		v := fmt.Sprintf("%s%d", long, i) // alike but for the last byte
		e.call(t, "big", 1, desc("user", v))
		e.call(t, "big", 1, withLimit(desc("other", v), 5, typev3.RateLimitUnit_MINUTE))
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels, total := map[string]bool{}, 0
	for _, mf := range mfs {
		if mf.GetName() != "sluice_envoy_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "descriptor" {
					continue
				}
				v := l.GetValue()
				total += len(v)
				labels[v] = true
				if len(v) > metrics.MaxDescriptorLabelBytes {
					t.Errorf("descriptor label of %d bytes (%.40q…); want at most %d", len(v), v, metrics.MaxDescriptorLabelBytes)
				}
				if !utf8.ValidString(v) {
					t.Errorf("descriptor label %.40q… is not UTF-8", v)
				}
			}
			if got := m.GetCounter().GetValue(); got != 1 {
				t.Errorf("a label counted %v hits, want 1 (each value its own label)", got)
			}
		}
	}
	if len(labels) != 2*n {
		t.Errorf("%d distinct descriptor labels, want %d (values alike in their first bytes kept apart)", len(labels), 2*n)
	}
	if max := 2 * n * metrics.MaxDescriptorLabelBytes; total > max {
		t.Errorf("descriptor labels hold %d bytes, want at most %d", total, max)
	}
}

// TestEnvoyUnknownCreatesNoSeries: requests for domains no descriptor file
// configures, and descriptors no rule matches, create no series however
// many a client sends: the unknown domains are one counter, the unmatched
// descriptors nothing; a limit override on an unknown domain is ignored
// with the domain.
func TestEnvoyUnknownCreatesNoSeries(t *testing.T) {
	set := writeConf(t, `domain: known
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	e := startRLS(t, newStore(t, "memory"), set, envOpts{})
	for i := range 100 {
		v := fmt.Sprint("v", i)
		e.call(t, "unknown-"+v, 1, desc("user", v))
		e.call(t, "unknown-"+v, 1, withLimit(desc("user", v), 5, typev3.RateLimitUnit_MINUTE))
		e.call(t, "known", 1, desc("other-"+v, v), desc("user", "x", "deeper-"+v, v))
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch name := mf.GetName(); {
		case name == "sluice_envoy_unknown_domain_total":
			if got := mf.GetMetric()[0].GetCounter().GetValue(); got != 200 {
				t.Errorf("%s = %v, want 200", name, got)
			}
		case strings.HasPrefix(name, "sluice_envoy_"):
			if n := len(mf.GetMetric()); n != 0 {
				t.Errorf("%s: %d series, want none (nothing matched a rule)", name, n)
			}
		}
	}
}

// TestEnvoyLabelsHoldNoRequest: a descriptor label made by a request
// (detailed_metric) keeps nothing of that request. The gRPC codec reads a
// request's strings as substrings of one copy of the message, and the
// counters of a new label kept the request's domain: its whole message,
// up to 1 MiB, for as long as the label lives (for ever; 1,000 such
// labels, a gigabyte).
func TestEnvoyLabelsHoldNoRequest(t *testing.T) {
	set := writeConf(t, `domain: big
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	e := startRLS(t, newStore(t, "memory"), set, envOpts{})
	const n, pad = 32, 960 << 10
	padding := strings.Repeat("p", pad) // matches no descriptor
	live := func() int64 {
		runtime.GC() // and heap's: a sync.Pool lets go of what it holds in two
		h, _ := heap()
		return int64(h)
	}
	before := live()
	for i := range n {
		e.call(t, "big", 1, desc("user", fmt.Sprint("u", i)), desc("padding", padding))
	}
	held := live() - before
	if held > n*pad/4 {
		t.Errorf("%d new labels, each made by a request of %d KiB, hold %d KiB of heap; want far less than the requests (%d KiB)", n, pad>>10, held>>10, n*pad>>10)
	}
}
