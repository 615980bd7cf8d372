package listener

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/metrics"
)

// TestMetricHelp: the HELP of the connection counters says what this
// package counts in them, with its own figures: an operator reading
// /metrics learns there when a connection is counted slow (the client
// did not send headers or a body in time, or did not take its answer
// within send_timeout: conn.sendFailed) and when one is closed for early
// resets (minResetCheck requests, more than half reset within
// earlyReset), not a threshold the code no longer uses.
func TestMetricHelp(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg).Listener("api")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	help := map[string]string{}
	for _, mf := range mfs {
		help[mf.GetName()] = mf.GetHelp()
	}
	for name, want := range map[string][]string{
		"sluice_connections_closed_slow_total":   {"read_header_timeout", "body_read_timeout", "send_timeout"},
		"sluice_connections_closed_resets_total": {"carried " + strconv.Itoa(minResetCheck) + " requests", "more than half", "within " + earlyReset.String()},
	} {
		h, ok := help[name]
		if !ok {
			t.Errorf("%s not registered", name)
			continue
		}
		for _, w := range want {
			if !strings.Contains(h, w) {
				t.Errorf("HELP of %s = %q: it does not say %q", name, h, w)
			}
		}
	}
}
