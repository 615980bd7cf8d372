package daemon

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSpecMetricsScraped scrapes a real daemon's GET /metrics over HTTP, as
// Prometheus does, and checks each series the product contract names —
// sluice_decisions_total{rule,result}, sluice_store_errors_total,
// sluice_decision_duration_seconds (histogram),
// sluice_config_reloads_total{result} — for its type, its HELP text, its
// exact label names and label values, and its value against what the
// clients were answered.
func TestSpecMetricsScraped(t *testing.T) {
	// Its fixed windows count in hours since the epoch: not across an edge.
	redistest.ClearOfWindowEdge(t, time.Hour, 2*time.Minute)
	up := startUpstream(t)
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: %s}
rules:
  - name: strict
    match: {path: /strict}
    rate: 2/h
    algorithm: fixed_window
  - name: watch
    match: {path: /s}
    rate: 1/h
    algorithm: fixed_window
    action: shadow
`, up.url)
	td := startDaemon(t, yaml)

	// strict: 5 checks, 2 allowed and 3 refused; watch: 3 proxied
	// requests, all passed on, 1 within the limit and 2 shadow-denied.
	allowed, refused := 0, 0
	for range 5 {
		a, status := check(t, td.api, "strict", "k", 1)
		if status != http.StatusOK {
			t.Fatalf("POST /v1/check: %d", status)
		}
		if a.Allowed {
			allowed++
		} else {
			refused++
		}
	}
	for range 3 {
		if r := get(t, td.proxy+"/s"); r.status != http.StatusOK {
			t.Fatalf("GET /s through the proxy: %d %q, want 200 (a shadow rule never blocks)", r.status, r.body)
		}
	}
	if allowed != 2 || refused != 3 || up.count() != 3 {
		t.Fatalf("strict: %d allowed, %d refused; upstream got %d; want 2, 3, 3", allowed, refused, up.count())
	}
	// One refused reload, then one applied.
	replaceFile(t, td.path, yaml+"  - name: broken\n    rate: nonsense\n")
	if r := td.waitReload(); r.Err == nil {
		t.Fatal("a config with rate: nonsense was applied")
	}
	replaceFile(t, td.path, yaml+"  - name: extra\n    rate: 5/s\n    match: {path: /never}\n")
	if r := td.waitReload(); r.Err != nil {
		t.Fatalf("reload: %v", r.Err)
	}

	fams := scrape(t, td.api+"/metrics")
	for _, c := range []struct {
		name, typ string
		labels    []string // exact label names of each sample (a histogram's le aside)
	}{
		{"sluice_decisions_total", "counter", []string{"result", "rule"}},
		{"sluice_store_errors_total", "counter", nil},
		{"sluice_decision_duration_seconds", "histogram", nil},
		{"sluice_config_reloads_total", "counter", []string{"result"}},
	} {
		f := fams[c.name]
		if f == nil {
			t.Errorf("GET /metrics has no %s", c.name)
			continue
		}
		if f.typ != c.typ {
			t.Errorf("%s is of TYPE %q, want %q", c.name, f.typ, c.typ)
		}
		if strings.TrimSpace(f.help) == "" {
			t.Errorf("%s has no HELP text", c.name)
		}
		if len(f.samples) == 0 {
			t.Errorf("%s has no sample", c.name)
		}
		for _, s := range f.samples {
			names := slices.Sorted(maps.Keys(s.labels))
			if c.typ == "histogram" && s.name == c.name+"_bucket" {
				names = slices.DeleteFunc(names, func(n string) bool { return n == "le" })
			}
			if !slices.Equal(names, c.labels) {
				t.Errorf("%s has labels %v, want %v", s.name, names, c.labels)
			}
		}
	}
	if t.Failed() {
		return
	}

	dec := fams["sluice_decisions_total"]
	for _, s := range dec.samples {
		if r := s.labels["result"]; r != "allowed" && r != "denied" && r != "shadow_denied" {
			t.Errorf("sluice_decisions_total has result=%q, not one of allowed, denied, shadow_denied", r)
		}
		if r := s.labels["rule"]; r != "strict" && r != "watch" && r != "extra" {
			t.Errorf("sluice_decisions_total has rule=%q, no configured rule", r)
		}
	}
	for _, c := range []struct {
		rule, result string
		want         float64
	}{
		{"strict", "allowed", 2}, {"strict", "denied", 3}, {"strict", "shadow_denied", 0},
		{"watch", "allowed", 1}, {"watch", "denied", 0}, {"watch", "shadow_denied", 2},
		{"extra", "allowed", 0}, {"extra", "denied", 0}, {"extra", "shadow_denied", 0},
	} {
		n := 0
		for _, s := range dec.samples {
			if s.labels["rule"] == c.rule && s.labels["result"] == c.result {
				n++
			}
		}
		if n != 1 {
			t.Errorf("sluice_decisions_total{rule=%q,result=%q}: %d series, want 1", c.rule, c.result, n)
		}
		if got := dec.value("sluice_decisions_total", "rule", c.rule, "result", c.result); got != c.want {
			t.Errorf("sluice_decisions_total{rule=%q,result=%q} = %v, want %v", c.rule, c.result, got, c.want)
		}
	}
	if got := fams["sluice_store_errors_total"].value("sluice_store_errors_total"); got != 0 {
		t.Errorf("sluice_store_errors_total = %v, want 0 (the memory store never fails)", got)
	}
	h := fams["sluice_decision_duration_seconds"]
	if got := h.value("sluice_decision_duration_seconds_count"); got != 8 {
		t.Errorf("sluice_decision_duration_seconds_count = %v, want 8 (one per request decided)", got)
	}
	if got := h.value("sluice_decision_duration_seconds_bucket", "le", "+Inf"); got != 8 {
		t.Errorf(`sluice_decision_duration_seconds_bucket{le="+Inf"} = %v, want 8`, got)
	}
	if got := h.value("sluice_decision_duration_seconds_sum"); got <= 0 {
		t.Errorf("sluice_decision_duration_seconds_sum = %v, want > 0", got)
	}
	rl := fams["sluice_config_reloads_total"]
	if len(rl.samples) != 2 {
		t.Errorf("sluice_config_reloads_total has %d series, want 2 (success, failure)", len(rl.samples))
	}
	for result, want := range map[string]float64{"success": 1, "failure": 1} {
		if got := rl.value("sluice_config_reloads_total", "result", result); got != want {
			t.Errorf("sluice_config_reloads_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}
