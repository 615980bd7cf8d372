// Package metricstest flattens a Prometheus registry for assertions in tests.
package metricstest

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Gather flattens reg's metrics into "name{l1="v1",l2="v2"}" → value, with
// histograms as name_count and name_sum.
func Gather(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			sort.Strings(labels)
			suffix := ""
			if len(labels) > 0 {
				suffix = "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[mf.GetName()+suffix] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[mf.GetName()+suffix] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[mf.GetName()+"_count"+suffix] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+suffix] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}
