package daemon

import (
	"net/http"
	"path/filepath"
	"testing"
)

// TestCountersSurviveReloads: the counters of /metrics never go down
// across reloads (Prometheus reads a drop as a restart, and rate() over it
// as a reset): a rule's decisions and the Envoy service's hits go on from
// where they were through a reload that changes both limits (a new engine,
// new descriptor rules) and through one refused late (its descriptor file
// broken, found after its rules were built), and the reload counter counts
// both.
func TestCountersSurviveReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	rl := filepath.Join(dir, "rl.yaml")
	conf := func(rate string) string {
		return "listen: 127.0.0.1:0\ngrpc:\n  listen: 127.0.0.1:0\n  config: [rl.yaml]\nrules:\n  - {name: keep, rate: " + rate + "}\n"
	}
	descs := func(unit string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + unit + ", requests_per_unit: 100}\n"
	}
	mustWrite(t, rl, descs("minute"))
	mustWrite(t, path, conf("100/m"))
	td := startDaemonFile(t, path)

	decided := 0
	decide := func(n int) {
		t.Helper()
		for range n {
			if _, status := check(t, td.api, "keep", "a", 1); status != http.StatusOK {
				t.Fatalf("POST /v1/check: %d", status)
			}
			if r := do(t, http.MethodPost, td.api+"/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`); r.status != http.StatusOK {
				t.Fatalf("POST /json: %d %s", r.status, r.body)
			}
			decided++
		}
	}
	counts := func(when string) {
		t.Helper()
		for _, c := range []struct {
			name   string
			labels []string
		}{
			{"sluice_decisions_total", []string{"rule", "keep", "result", "allowed"}},
			{"sluice_envoy_hits_total", []string{"domain", "d", "descriptor", "k"}},
		} {
			if got := td.metric(c.name, c.labels...); got != float64(decided) {
				t.Errorf("%s: %s%v = %v, want %d (every decision so far)", when, c.name, c.labels, got, decided)
			}
		}
	}

	decide(2)
	counts("before any reload")
	mustWrite(t, rl, descs("hour"))
	mustWrite(t, path, conf("200/m"))
	if err := td.d.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	counts("after a reload changing both limits")
	decide(1)
	counts("a decision after it")

	mustWrite(t, rl, descs("fortnight"))
	mustWrite(t, path, conf("300/m"))
	if err := td.d.Reload(); err == nil {
		t.Fatal("Reload with a broken descriptor file: nil error, want a refusal")
	}
	counts("after a refused reload")
	decide(1)
	counts("a decision after it")
	if ok, failed := td.metric("sluice_config_reloads_total", "result", "success"), td.metric("sluice_config_reloads_total", "result", "failure"); ok < 1 || failed < 1 {
		t.Errorf("sluice_config_reloads_total: success %v, failure %v; want at least 1 each", ok, failed)
	}
}
