package engine_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/descriptors"
	"github.com/sluicehq/sluice/internal/metrics/metricstest"
)

// TestNegativeDurationObserved: an Envoy request of negative descriptors
// alone (is_negative_hits, as a stream-done call gives hits back) asks
// the store and is observed in sluice_decision_duration_seconds, once, as
// every request decided is; one with a descriptor beside them, once too.
func TestNegativeDurationObserved(t *testing.T) {
	s, err := descriptors.Parse("d.yaml", []byte(envoyConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, realClock := range []bool{false, true} { // the engine's clock, or time.Now (timed differently)
		clk := &clock{t: t0}
		now := clk.Now
		if realClock {
			now = nil
		}
		e, reg := newEngine(t, "", now)
		count := func() float64 { return metricstest.Gather(t, reg)["sluice_decision_duration_seconds_count"] }
		decide(t, e, match(t, s, 1, [2]string{"user", "a"}))
		for _, c := range []struct {
			what string
			kvs  [][2]string
		}{
			{"a refund alone", [][2]string{{"user", "a"}}},
			{"two refunds", [][2]string{{"user", "a"}, {"global", "y"}}},
			{"a refund beside a take", [][2]string{{"user", "a"}, {"global", "y"}}},
		} {
			ds := match(t, s, 1, c.kvs...)
			for i := range ds {
				ds[i].Negative = c.what != "a refund beside a take" || i == 0
			}
			before := count()
			if res, st := decide(t, e, ds); res.OverLimit || res.StoreErr != nil || !st[0].Asked {
				t.Fatalf("%s: %+v, statuses %+v; want OK, the refund made", c.what, res, st)
			}
			if got := count() - before; got != 1 {
				t.Errorf("real clock %v: %s observed %v times, want once", realClock, c.what, got)
			}
		}
	}
}
