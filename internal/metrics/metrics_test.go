package metrics_test

import (
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
	"strconv"
	"testing"
	"time"

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
