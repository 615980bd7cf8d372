package metrics_test

import (
	"fmt"
	fnv1a "hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/metrics"
)

func TestMetricsNamesAndValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	r := m.Rule("login")
	if m.Rule("login") != r {
		t.Errorf("Rule(login) twice: got different handles, want the cached one")
	}
	r.Allowed()
	r.Allowed()
	r.Denied()
	r.ShadowDenied()
	r.GivenBack()
	m.StoreError()
	m.Fallback("allow")
	m.ObserveDecision(50 * time.Microsecond)
	m.ObserveDelay(time.Second)
	m.Reload(true)
	m.Reload(false)
	m.Reload(false)
	if err := m.GaugeFunc("sluice_memstore_keys", "keys", func() float64 { return 7 }); err != nil {
		t.Fatalf("GaugeFunc: %v", err)
	}

	got := metricstest.Gather(t, reg)
	for name, want := range map[string]float64{
		`sluice_decisions_total{result="allowed",rule="login"}`:       2,
		`sluice_decisions_total{result="denied",rule="login"}`:        1,
		`sluice_decisions_total{result="shadow_denied",rule="login"}`: 1,
		`sluice_config_reloads_total{result="failure"}`:               2,
		`sluice_config_reloads_total{result="success"}`:               1,
		`sluice_store_errors_total`:                                   1,
		`sluice_store_fallback_total{policy="allow"}`:                 1,
		`sluice_store_fallback_total{policy="deny"}`:                  0,
		`sluice_memstore_keys`:                                        7,
		`sluice_decision_duration_seconds_count`:                      1,
		`sluice_delay_seconds_count`:                                  1,
		`sluice_delay_given_back_total{rule="login"}`:                 1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("after traffic, %s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

func TestNilMetricsIsNoop(t *testing.T) {
	var m *metrics.Metrics
	r := m.Rule("x")
	r.Allowed()
	r.Denied()
	r.GivenBack()
	m.StoreError()
	m.Reload(true)
	m.ObserveDecision(time.Millisecond)
	if err := m.GaugeFunc("a", "b", func() float64 { return 0 }); err != nil {
		t.Errorf("nil GaugeFunc = %v, want nil", err)
	}
}

func BenchmarkRuleAllowed(b *testing.B) {
	m := metrics.New(prometheus.NewRegistry())
	r := m.Rule("bench")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Allowed()
		}
	})
}

// TestEnvoyDetailedLabelsBounded: labels carrying request values stop at
// MaxDetailedDescriptors; the rest count under "_other".
func TestEnvoyDetailedLabelsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := metrics.New(reg).Envoy()
	for i := range metrics.MaxDetailedDescriptors + 50 {
		e.Descriptor("d", "user_"+strconv.Itoa(i), true).Count(1, false, false, 0)
	}
	e.Descriptor("d", "configured.path", false).Count(2, true, false, 0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series, other := 0, 0.0
	for _, mf := range mfs {
		if mf.GetName() != "sluice_envoy_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			series++
			for _, l := range m.GetLabel() {
				if l.GetName() == "descriptor" && l.GetValue() == "_other" {
					other = m.GetCounter().GetValue()
				}
			}
		}
	}
	if series != metrics.MaxDetailedDescriptors+2 || other != 50 {
		t.Errorf("%d hits series with %v hits under _other; want %d series (the cap, _other and the configured path) and 50", series, other, metrics.MaxDetailedDescriptors+2)
	}
}

// A detailed label made of request values that are not UTF-8 (Envoy sends
// a header's bytes as they are) is a valid label value, U+FFFD for each
// such byte then "…" and the digest of the bytes, short or long: two
// values a byte apart are two series, and Descriptor does not panic (as
// client_golang does on a label value that is not UTF-8).
func TestEnvoyDetailedLabelsNotUTF8(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := metrics.New(reg).Envoy()
	long := strings.Repeat("\xe9", 2*metrics.MaxDescriptorLabelBytes)
	for _, v := range []string{"user_caf\xe9", "user_caf\xe8", long + "a", long + "b", "user_\xff" + strings.Repeat("é", 200)} {
		e.Descriptor("d", v, true).Count(1, false, false, 0)
	}
	labels := metricstest.LabelValues(t, reg, "sluice_envoy_hits_total", "descriptor")
	for v := range labels {
		if !utf8.ValidString(v) || len(v) > metrics.MaxDescriptorLabelBytes || !strings.Contains(v, "\ufffd") || !regexp.MustCompile(`…[0-9a-f]{16}$`).MatchString(v) {
			t.Errorf("label %q (%d bytes): want UTF-8 of at most %d bytes, U+FFFD for the bytes not UTF-8, then … and 16 hex digits", v, len(v), metrics.MaxDescriptorLabelBytes)
		}
	}
	if _, ok := labels["user_caf\ufffd…"+fnv("user_caf\xe9")]; len(labels) != 5 || !ok {
		t.Errorf("labels %v; want 5, user_caf\ufffd… and the digest of user_caf\\xe9 among them", labels)
	}
}

// fnv is FNV-1a (64 bits) of s in 16 hex digits.
func fnv(s string) string {
	h := fnv1a.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%016x", h.Sum64())
}
