package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestMetricsExposition runs a daemon with every kind of series (a Redis
// store with on_error local; rules of each action, sync, lease and shards;
// a proxy; the Envoy service with a detailed_metric descriptor), sends
// traffic, hostile rule names and many keys included, then checks the whole
// /metrics exposition: it passes client_golang's lint (promlint, as
// testutil.GatherAndLint runs it: names, units, HELP texts, counters named
// _total), it has the series the docs promise with
// their labels and values, and the rule label holds configured rule names
// only, whatever the requests named.
func TestMetricsExposition(t *testing.T) {
	redis := storeBlock(t, "redis")
	up := startUpstream(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
proxy: {listen: 127.0.0.1:0, upstream: %s}
grpc: {listen: 127.0.0.1:0, config: [rl.yaml]}
%s  on_error: local
rules:
  - name: shadowed
    rate: 1/m
    action: shadow
  - name: delayed
    match: {path: /d}
    rate: 100/s
    action: delay
  - name: synced
    key: [header:X-Api-Key]
    rate: 3/m
    algorithm: token_bucket
    sync: 50ms
  - name: leased
    key: [header:X-Tenant]
    rate: 100/m
    algorithm: gcra
    lease: auto
  - name: sharded
    key: [header:X-Shard]
    rate: 100/m
    algorithm: gcra
    shards: 2
  - name: orders
    match: {methods: [POST], path: /orders/*}
    rate: 1/m
    action: defer
`, up.url, redis)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDaemonFile(t, path)
	configured := []string{"shadowed", "delayed", "synced", "leased", "sharded", "orders"}

	for i := range 5 {
		do(t, http.MethodGet, td.proxy+"/d", "", "X-Api-Key", "k", "X-Tenant", "t", "X-Shard", "s"+strconv.Itoa(i))
		do(t, http.MethodPost, td.proxy+"/orders/"+strconv.Itoa(i), "x")
		do(t, http.MethodPost, td.api+"/json", `{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"u`+strconv.Itoa(i)+`"}]}]}`)
	}
	for _, name := range []string{"nope", `<x>"`, strings.Repeat("r", 300), "shadowed\n"} {
		if r := do(t, http.MethodPost, td.api+"/v1/check", fmt.Sprintf(`{"rule":%q,"key":"k"}`, name)); r.status != http.StatusBadRequest {
			t.Errorf("/v1/check of unknown rule %q: %d %s, want 400", name, r.status, r.body)
		}
	}
	for i := range 50 {
		check(t, td.api, "synced", "key-"+strconv.Itoa(i), 1)
	}

	mfs, err := td.d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	// testutil.GatherAndLint's linter, without the test dependency it
	// would add to go.mod.
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	families := map[string]bool{}
	for _, mf := range mfs {
		families[mf.GetName()] = true
		if strings.TrimSpace(mf.GetHelp()) == "" {
			t.Errorf("%s has no HELP text", mf.GetName())
		}
		if id := reGoIdent.FindString(mf.GetHelp()); id != "" {
			t.Errorf("%s's HELP text names the Go identifier %s, which tells an operator nothing: %q", mf.GetName(), id, mf.GetHelp())
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "rule" && !slices.Contains(configured, lp.GetValue()) && !strings.HasPrefix(lp.GetValue(), "envoy/d/") {
					t.Errorf("%s has rule=%q, which is no configured rule", mf.GetName(), lp.GetValue())
				}
			}
		}
	}
	for _, name := range []string{"sluice_decisions_total", "sluice_store_errors_total", "sluice_decision_duration_seconds", "sluice_config_reloads_total"} {
		if !families[name] {
			t.Errorf("no %s in the exposition", name)
		}
	}
	for _, rule := range configured {
		for _, result := range []string{"allowed", "denied", "shadow_denied"} {
			if !hasSeries(t, td, "sluice_decisions_total", "rule", rule, "result", result) {
				t.Errorf("no sluice_decisions_total{rule=%q,result=%q}", rule, result)
			}
		}
	}
	for _, result := range []string{"success", "failure"} {
		if !hasSeries(t, td, "sluice_config_reloads_total", "result", result) {
			t.Errorf("no sluice_config_reloads_total{result=%q}", result)
		}
	}
	if got := td.metric("sluice_decisions_total", "rule", "shadowed", "result", "shadow_denied"); got < 1 {
		t.Errorf("sluice_decisions_total{rule=shadowed,result=shadow_denied} = %v, want the shadow rule's refusals counted", got)
	}
	if got := td.metric("sluice_decisions_total", "rule", "synced", "result", "denied"); got < 2 {
		t.Errorf("sluice_decisions_total{rule=synced,result=denied} = %v, want the requests over 3/m counted", got)
	}
	if got := td.metric("sluice_decision_duration_seconds"); got < 10 {
		t.Errorf("sluice_decision_duration_seconds has %v observations, want one per decision", got)
	}
}

// reGoIdent finds a qualified Go identifier, such as fleet.DefaultMaxKeys.
var reGoIdent = regexp.MustCompile(`\b[a-z]+\.[A-Z][A-Za-z]+\b`)

// hasSeries tells whether the registry holds a series named name with the
// labels (name=value pairs), whatever its value.
func hasSeries(t *testing.T, td *testDaemon, name string, labels ...string) bool {
	t.Helper()
	mfs, err := td.d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				return true
			}
		}
	}
	return false
}
